//! Numeric features for the MLP: parsed from the data's input field, standardised with means and
//! deviations fitted on the train partition only (the MLP's counterpart of the tokenizer).
//!
//! A sample's features are one field: a JSON array of numbers (`"x": [0.3, 1, -2.5]`), or a
//! string of numbers separated by commas, semicolons or spaces (a CSV column `"0.3 1 -2.5"`).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::data::Samples;
use crate::error::{Result, TrainError};

/// Format tag written into `features.json`.
pub const FORMAT: &str = "contrai-standardize-v1";

/// Per-feature standardisation fitted on train: `(x − mean) / std`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scaler {
    /// Format tag ([`FORMAT`]).
    pub format: String,
    /// Features a sample.
    pub dim: usize,
    /// Train mean of each feature.
    pub mean: Vec<f32>,
    /// Train standard deviation of each feature (1 where a feature is constant).
    pub std: Vec<f32>,
}

/// The numbers in one sample's feature text (the data stage reads them the same way).
pub use contrai_data::numeric::parse;

/// Every sample's features, checked to have `dim` numbers (the first sample's count when `None`).
pub fn rows(samples: &Samples, dim: Option<usize>, part: &str, field: &str) -> Result<Vec<Vec<f32>>> {
    let mut want = dim;
    samples
        .texts
        .iter()
        .zip(&samples.ids)
        .map(|(text, id)| {
            let bad = |what: String| {
                TrainError::BadData(format!(
                    "{part} partition, sample `{id}`, field `{field}`: {what} (expected numeric features: \
                     a JSON array of numbers or numbers separated by commas or spaces)"
                ))
            };
            let x = parse(text).map_err(bad)?;
            match want {
                _ if x.is_empty() => Err(bad("no numbers".into())),
                Some(d) if d != x.len() => Err(bad(format!(
                    "{} numbers where the train partition has {d}",
                    x.len()
                ))),
                _ => {
                    want = Some(x.len());
                    Ok(x)
                }
            }
        })
        .collect()
}

impl Scaler {
    /// Fits means and deviations on the train partition's features.
    pub fn fit(train: &[Vec<f32>]) -> Result<Scaler> {
        let dim = train.first().map_or(0, Vec::len);
        if dim == 0 {
            return Err(TrainError::BadData(
                "the train partition has no features to fit".into(),
            ));
        }
        let n = train.len() as f64;
        let mut mean = vec![0f64; dim];
        for x in train {
            mean.iter_mut().zip(x).for_each(|(m, &v)| *m += f64::from(v) / n);
        }
        let mut var = vec![0f64; dim];
        for x in train {
            var.iter_mut()
                .zip(x.iter().zip(&mean))
                .for_each(|(s, (&v, m))| *s += (f64::from(v) - m).powi(2) / n);
        }
        Ok(Scaler {
            format: FORMAT.into(),
            dim,
            mean: mean.iter().map(|&m| m as f32).collect(),
            std: var
                .iter()
                .map(|&v| if v.sqrt() > 1e-12 { v.sqrt() as f32 } else { 1.0 })
                .collect(),
        })
    }

    /// The standardised features of `rows`, row-major.
    pub fn encode(&self, rows: &[Vec<f32>]) -> Vec<f32> {
        rows.iter()
            .flat_map(|x| {
                x.iter()
                    .zip(self.mean.iter().zip(&self.std))
                    .map(|(&v, (m, s))| (v - m) / s)
            })
            .collect()
    }

    /// Writes `features.json` atomically.
    pub fn save(&self, path: &Path) -> Result<()> {
        Ok(contrai_run::write_json(path, self)?)
    }

    /// Reads a scaler written by [`Scaler::save`].
    pub fn load(path: &Path) -> Result<Scaler> {
        let s: Scaler = contrai_run::read_json(path)?;
        if s.format != FORMAT || s.mean.len() != s.dim || s.std.len() != s.dim {
            return Err(TrainError::Corrupt {
                path: path.to_path_buf(),
                message: format!("not a `{FORMAT}` scaler of {} features", s.dim),
            });
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples(texts: &[&str]) -> Samples {
        Samples {
            ids: (0..texts.len()).map(|i| format!("s{i}")).collect(),
            texts: texts.iter().map(|t| t.to_string()).collect(),
            labels: vec!["a".into(); texts.len()],
        }
    }

    #[test]
    fn parses_arrays_and_separated_numbers() {
        assert_eq!(parse("[0.5,-2,3e1]").unwrap(), [0.5, -2.0, 30.0]);
        assert_eq!(parse(" 1; 2 ,3\t4 ").unwrap(), [1.0, 2.0, 3.0, 4.0]);
        assert!(parse("[1, x]").unwrap_err().contains("`x` is not a number"));
        assert!(parse("1 NaN").unwrap_err().contains("not finite"));
    }

    #[test]
    fn standardises_with_train_statistics_and_names_bad_rows() {
        let train = rows(&samples(&["[1, 10]", "[3, 10]"]), None, "train", "x").unwrap();
        let s = Scaler::fit(&train).unwrap();
        assert_eq!((s.mean.clone(), s.std.clone()), (vec![2.0, 10.0], vec![1.0, 1.0]));
        assert_eq!(
            s.encode(&[vec![4.0, 12.0]]),
            [2.0, 2.0],
            "constant feature: std 1"
        );
        let err = rows(&samples(&["[1, 2]", "[1, 2, 3]"]), None, "val", "x").unwrap_err();
        assert!(
            err.to_string()
                .contains("val partition, sample `s1`, field `x`: 3 numbers where the train partition has 2"),
            "{err}"
        );
        let err = rows(&samples(&["1 2", "1 b"]), Some(2), "train", "x").unwrap_err();
        assert!(
            err.to_string().contains("sample `s1`") && err.to_string().contains("`b` is not a number"),
            "{err}"
        );
    }
}
