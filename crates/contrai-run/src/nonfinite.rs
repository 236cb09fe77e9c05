//! Measured floats that may be NaN or infinite (a diverged loss, an overflowing half-precision
//! evaluation). JSON has no such numbers and serde_json would write `null`, which no typed reader
//! takes back: they go out as the strings `"NaN"`, `"Infinity"` and `"-Infinity"` (what
//! JavaScript, pandas and Contrai's doctor read), and `null` reads as NaN (rows written before).
//!
//! Use as `#[serde(with = "crate::nonfinite")]` on an `f32` or `f64` field.

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserializer, Serializer};

/// A float type the rows hold, written in its own precision (an `f32` loss stays `0.69`).
pub trait Measured: Copy {
    /// The value as an `f64`.
    fn wide(self) -> f64;
    /// The value from an `f64`.
    fn narrow(x: f64) -> Self;
    /// Writes the finite value as a JSON number of its own precision.
    fn number<S: Serializer>(self, s: S) -> Result<S::Ok, S::Error>;
}

impl Measured for f32 {
    fn wide(self) -> f64 {
        f64::from(self)
    }
    fn narrow(x: f64) -> Self {
        x as f32
    }
    fn number<S: Serializer>(self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f32(self)
    }
}

impl Measured for f64 {
    fn wide(self) -> f64 {
        self
    }
    fn narrow(x: f64) -> Self {
        x
    }
    fn number<S: Serializer>(self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self)
    }
}

/// The string a non-finite value is written as.
pub fn word(x: f64) -> &'static str {
    if x.is_nan() {
        "NaN"
    } else if x > 0.0 {
        "Infinity"
    } else {
        "-Infinity"
    }
}

/// Writes a finite value as a number, a non-finite one as its [`word`].
pub fn serialize<T: Measured, S: Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    if v.wide().is_finite() {
        v.number(s)
    } else {
        s.serialize_str(word(v.wide()))
    }
}

/// Reads a number, one of the three words (Python's `nan`/`inf` spellings too), or `null` as NaN.
pub fn deserialize<'de, T: Measured, D: Deserializer<'de>>(d: D) -> Result<T, D::Error> {
    d.deserialize_any(Loose).map(T::narrow)
}

/// The visitor behind [`deserialize`].
struct Loose;

impl Visitor<'_> for Loose {
    type Value = f64;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(r#"a number, or "NaN", "Infinity" or "-Infinity""#)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<f64, E> {
        Ok(v)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<f64, E> {
        Ok(v as f64)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<f64, E> {
        Ok(v as f64)
    }
    fn visit_unit<E: de::Error>(self) -> Result<f64, E> {
        Ok(f64::NAN)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<f64, E> {
        match v {
            "NaN" | "nan" => Ok(f64::NAN),
            "Infinity" | "inf" => Ok(f64::INFINITY),
            "-Infinity" | "-inf" => Ok(f64::NEG_INFINITY),
            _ => Err(E::invalid_value(de::Unexpected::Str(v), &self)),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    #[derive(Debug, Serialize, Deserialize)]
    struct Row {
        #[serde(with = "super")]
        loss: f32,
        #[serde(with = "super")]
        lr: f64,
    }

    fn json(loss: f32, lr: f64) -> String {
        serde_json::to_string(&Row { loss, lr }).unwrap()
    }

    fn back(s: &str) -> Row {
        serde_json::from_str(s).unwrap()
    }

    #[test]
    fn finite_values_keep_their_precision_and_non_finite_ones_become_words() {
        assert_eq!(json(0.69, 1e-5), r#"{"loss":0.69,"lr":0.00001}"#);
        assert_eq!(json(f32::NAN, f64::INFINITY), r#"{"loss":"NaN","lr":"Infinity"}"#);
        assert_eq!(json(f32::NEG_INFINITY, 0.0), r#"{"loss":"-Infinity","lr":0.0}"#);
        let r = back(&json(f32::NAN, f64::NEG_INFINITY));
        assert!(r.loss.is_nan() && r.lr == f64::NEG_INFINITY);
        assert_eq!(back(&json(0.69, 3e-4)).loss, 0.69);
    }

    #[test]
    fn null_integers_and_python_spellings_read_back() {
        let r = back(r#"{"loss":null,"lr":2}"#);
        assert!(r.loss.is_nan() && r.lr == 2.0);
        assert_eq!(back(r#"{"loss":"inf","lr":"-inf"}"#).loss, f32::INFINITY);
        let e = serde_json::from_str::<Row>(r#"{"loss":"high","lr":1}"#).unwrap_err();
        assert!(e.to_string().contains(r#"expected a number, or "NaN""#), "{e}");
    }
}
