//! Keras `History` saved as JSON (`json.dump(history.history)`): each metric's list of per-epoch
//! values, bare or under `history`/`metrics` (beside an `epochs` list), NaN as a bare token. Two
//! models' histories saved in one file under prefixes (`reg_loss`, `cls_loss`) are two runs. A
//! loop's per-epoch records saved in one file — a list of objects, under `history`, or keyed by
//! epoch (`{"1": {"train_loss": …}}`) — are read as JSON lines' rows are.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Map, Value};

use super::json_tolerant::{parse_tolerant, value_f64};
use super::{ReadError, read_text, to_step};
use crate::series::{RawRun, XUnit};
use crate::tags;

/// Members a tool wraps the History's lists in.
const WRAPPERS: [&str; 2] = ["history", "metrics"];
/// Members that carry the x-axis instead of a metric.
const EPOCH_KEYS: [&str; 2] = ["epochs", "epoch"];
/// Members that hold the run's own arguments.
const CONFIGS: [&str; 3] = ["config", "args", "hparams"];

/// Whether a JSON file's first bytes open a History: an object with a member that is a list of
/// numbers under a metric's name (or an `epochs` list), or an `epochs`/`history`/`metrics`
/// first member — a run's `config` object may come first; a model's config holds no metric's
/// list.
pub fn looks_like(head: &str) -> bool {
    let head = head.trim_start();
    if let Some(list) = head.strip_prefix('[') {
        return opens_records(list);
    }
    let Some(rest) = head.strip_prefix('{') else {
        return false;
    };
    let first = first_member(rest);
    // Records keyed by epoch: `{"1": {"train_loss": 0.9, …`.
    if let Some((key, after)) = first
        && key.trim().parse::<u64>().is_ok()
        && after.starts_with('{')
    {
        return opens_records(after);
    }
    if let Some((key, _)) = first
        && (EPOCH_KEYS.contains(&key) || WRAPPERS.contains(&key))
    {
        return true;
    }
    members(rest).any(|(key, after)| {
        (EPOCH_KEYS.contains(&key) || tags::classify(key).is_some())
            && after.strip_prefix('[').is_some_and(|list| {
                let list = list.trim_start();
                list.starts_with(|c: char| c.is_ascii_digit() || c == '-' || c == '.')
                    || list.starts_with("NaN")
                    || list.starts_with("Infinity")
            })
    })
}

/// Whether `text` (after a list's `[`, or a record's epoch key) opens a per-epoch record: an object with a member under a
/// metric's name whose value is a number.
fn opens_records(text: &str) -> bool {
    let Some(record) = text.trim_start().strip_prefix('{') else {
        return false;
    };
    members(record).any(|(key, after)| {
        tags::classify(key).is_some()
            && after.starts_with(|c: char| c.is_ascii_digit() || c == '-' || c == '.' || c == 'N')
    })
}

/// Every `"key": value` in `text` at any depth, with what follows the colon (trimmed): a scan
/// of the file's first bytes, which may end anywhere.
fn members(text: &str) -> impl Iterator<Item = (&str, &str)> {
    text.match_indices('"')
        .filter_map(move |(i, _)| member_at(&text[i..]))
}

/// The `"key": value` that `text` opens with (at its quote), with what follows the colon
/// (trimmed), if the text holds them.
fn member_at(text: &str) -> Option<(&str, &str)> {
    let rest = text.strip_prefix('"')?;
    let end = rest.find('"')?;
    let after = rest[end + 1..].trim_start().strip_prefix(':')?;
    Some((&rest[..end], after.trim_start()))
}

/// Whether a JSON file's first bytes are too few to tell (empty, or cut before its first
/// member's value begins): a file being written, to look at again once it grows.
pub fn undecided(head: &str) -> bool {
    let head = head.trim_start();
    let Some(rest) = head.strip_prefix('{') else {
        return head.is_empty();
    };
    if rest.trim_start().starts_with('}') {
        return false;
    }
    first_member(rest)
        .is_none_or(|(_, after)| after.is_empty() || after.trim_start_matches('[').trim().is_empty())
}

/// The first member's key and what follows its colon (trimmed), if the text holds them.
fn first_member(rest: &str) -> Option<(&str, &str)> {
    member_at(rest.trim_start())
}

/// Reads a History JSON into its runs: one, or one per model prefix.
pub fn read(path: &Path) -> Result<Vec<RawRun>, ReadError> {
    let err = |line: usize, field: &str, reason: String| ReadError::Parse {
        path: path.to_path_buf(),
        line,
        field: field.to_string(),
        reason,
    };
    let text = read_text(path)?;
    let v = parse_tolerant(&text).map_err(|e| err(e.line(), "json", e.to_string()))?;
    let name = path
        .file_stem()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "history".into());
    if let Some(records) = records(&v) {
        return read_records(path, name, &records).map(|run| vec![run]);
    }
    let Some(top) = v.as_object() else {
        return Err(err(1, "json", "expected an object of metric lists".into()));
    };
    let lists = WRAPPERS
        .iter()
        .find_map(|w| top.get(*w).and_then(Value::as_object))
        .unwrap_or(top);
    let epochs: Option<Vec<u64>> = EPOCH_KEYS
        .iter()
        .find_map(|k| top.get(*k).or_else(|| lists.get(*k)))
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|x| value_f64(x).map_or(0, to_step)).collect());
    // A run's own arguments saved beside its lists (`config`, `args`, `hparams`).
    let file = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut setup = crate::stated_setup::Setup::default();
    for args in CONFIGS
        .iter()
        .filter_map(|k| top.get(*k).and_then(Value::as_object))
    {
        for (k, v) in args {
            if let Some(v) = super::context::json_scalar(v) {
                setup.absorb(k, &v, &file);
            }
        }
    }
    let mut runs = Vec::new();
    for (prefix, metrics) in by_model(lists) {
        let run_name = if prefix.is_empty() { name.clone() } else { prefix };
        let mut run = RawRun::new(run_name, path.display().to_string(), "keras_json");
        run.hints.setup = setup.clone();
        for (tag, values) in metrics {
            for (i, x) in values.iter().enumerate() {
                let step = epochs
                    .as_ref()
                    .and_then(|e| e.get(i).copied())
                    .unwrap_or(i as u64);
                if let Some(x) = value_f64(x) {
                    run.push(&tag, step, x);
                }
            }
        }
        run.hints.x_unit = XUnit::Epoch;
        runs.push(run);
    }
    if runs.is_empty() {
        return Err(err(1, "json", "no list of per-epoch metric values".into()));
    }
    Ok(runs)
}

/// One per-epoch record, with the epoch its key names when keyed by epoch.
type Record<'a> = (Option<u64>, &'a Map<String, Value>);

/// The per-epoch records a loop saved instead of lists, each with the epoch its key names when
/// keyed by epoch: a list of objects, under a wrapper (`history`), or an object keyed by epoch
/// (in the epochs' order); `None` for a History's lists.
fn records(v: &Value) -> Option<Vec<Record<'_>>> {
    let list = match v {
        Value::Array(list) => list,
        Value::Object(top) => match WRAPPERS
            .iter()
            .find_map(|w| top.get(*w).and_then(Value::as_array))
        {
            Some(list) => list,
            None => {
                let mut keyed = top
                    .iter()
                    .map(|(k, r)| Some((Some(k.trim().parse::<u64>().ok()?), r.as_object()?)))
                    .collect::<Option<Vec<_>>>()?;
                keyed.sort_by_key(|(epoch, _)| *epoch);
                return (!keyed.is_empty()).then_some(keyed);
            }
        },
        _ => return None,
    };
    let records = list
        .iter()
        .map(|r| Some((None, r.as_object()?)))
        .collect::<Option<Vec<_>>>()?;
    (!records.is_empty()).then_some(records)
}

/// One run from per-epoch records, each read as a JSON-lines row is (its step or epoch key, else
/// its place; nested metrics one level down); a record keyed by epoch has that epoch.
fn read_records(path: &Path, name: String, records: &[Record<'_>]) -> Result<RawRun, ReadError> {
    let mut run = RawRun::new(name, path.display().to_string(), "keras_json");
    let mut rows = super::jsonl::Jsonl::new(path);
    for (epoch, record) in records {
        match epoch {
            Some(e) if !record.contains_key("epoch") => {
                let mut keyed = (*record).clone();
                keyed.insert("epoch".into(), Value::from(*e));
                rows.next_record(&mut run, &keyed)?;
            }
            _ => rows.next_record(&mut run, record)?,
        }
    }
    super::Stream::finish(&rows, &mut run);
    Ok(run)
}

/// The metric lists grouped by model: by prefix (`reg_`, `cls_`) when two or more prefixes each
/// have their own `loss` and the file has no bare `loss`, else all in one group.
fn by_model(lists: &Map<String, Value>) -> BTreeMap<String, Vec<(String, &Vec<Value>)>> {
    let metrics: Vec<(&String, &Vec<Value>)> = lists
        .iter()
        .filter(|(k, _)| !EPOCH_KEYS.contains(&k.as_str()))
        .filter_map(|(k, v)| v.as_array().map(|a| (k, a)))
        .filter(|(k, _)| tags::classify(k).is_some())
        .collect();
    let prefixes: Vec<&str> = metrics
        .iter()
        .filter_map(|(k, _)| k.strip_suffix("_loss"))
        .filter(|p| !p.is_empty() && !is_role(p))
        .collect();
    let split = prefixes.len() >= 2 && !lists.contains_key("loss");
    let mut out: BTreeMap<String, Vec<(String, &Vec<Value>)>> = BTreeMap::new();
    for (k, v) in metrics {
        let owner = split
            .then(|| prefixes.iter().find(|p| k.starts_with(&format!("{p}_"))))
            .flatten();
        match owner {
            Some(p) => out
                .entry(p.to_string())
                .or_default()
                .push((k[p.len() + 1..].into(), v)),
            None => out.entry(String::new()).or_default().push((k.clone(), v)),
        }
    }
    out
}

/// Whether a loss's prefix names a split (`val_loss`) rather than a model.
fn is_role(prefix: &str) -> bool {
    tags::classify(&format!("{prefix}_loss")).is_some_and(|(s, _)| s != crate::series::Series::TrainLoss)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("history.json");
        std::fs::write(&p, text).unwrap();
        (dir, p)
    }

    #[test]
    fn a_history_dump_is_recognised_and_a_config_is_not() {
        assert!(looks_like("{\n  \"loss\": [\n    0.69, 0.5"));
        assert!(looks_like("{\"epochs\": [0.0, 1.0], \"metrics\": {"));
        assert!(looks_like("{\"val_loss\": [NaN, 1.0]"));
        assert!(!looks_like("{\"architectures\": [\"BertModel\"]"));
        assert!(!looks_like("{\"hidden_size\": 768"));
        assert!(!looks_like("[1, 2]"));
        // A run's config first, its lists after; a model's config has lists of no metric.
        assert!(looks_like(
            "{\"config\": {\"epochs\": 30, \"lr\": 0.001},\n \"train_loss\": [2.5, 1.9"
        ));
        assert!(!looks_like(
            "{\"model_type\": \"bert\", \"layers\": [1, 2], \"id2label\": {\"0\": \"a\"}}"
        ));
        for cut in ["", "{", "{\n  \"loss\"", "{\"loss\": ", "{\"loss\": [\n  "] {
            assert!(undecided(cut), "{cut:?}");
        }
        assert!(!undecided("{\"loss\": [0.5") && !undecided("{\"hidden_size\": 768") && !undecided("{}"));
    }

    #[test]
    fn a_loops_per_epoch_records_are_read_in_each_of_their_shapes() {
        use crate::series::Series;
        let steps = |text: &str| -> (Vec<u64>, usize) {
            let (_d, p) = write(text);
            let run = read(&p).unwrap().remove(0).into_runs().remove(0);
            let train = run.points(Series::TrainLoss).iter().map(|p| p.step).collect();
            (train, run.points(Series::ValLoss).len())
        };
        let list = r#"[{"epoch": 1, "train_loss": 0.9, "val_loss": 1.0},
                       {"epoch": 2, "train_loss": 0.7, "val_loss": 0.8}]"#;
        assert!(looks_like(list));
        assert_eq!(steps(list), (vec![1, 2], 2));
        let wrapped = r#"{"history": [{"epoch": 1, "train_loss": 7.7, "val_loss": 7.2, "step": 1250},
                                      {"epoch": 2, "train_loss": 7.0, "val_loss": 6.9, "step": 2500}]}"#;
        assert!(looks_like(wrapped));
        assert_eq!(steps(wrapped), (vec![1250, 2500], 2));
        // Keyed by epoch, in the epochs' order (not the keys' text order).
        let keyed = r#"{"1": {"train_loss": 18.7, "val_loss": 2.33}, "2": {"train_loss": 19.7, "val_loss": 2.33},
                        "10": {"train_loss": 19.0, "val_loss": 2.33}}"#;
        assert!(looks_like(keyed));
        assert_eq!(steps(keyed), (vec![1, 2, 10], 3));
        // A loop's lists of losses under plural names.
        assert_eq!(
            steps(r#"{"train_losses": [1.6, 1.4, 1.3], "val_losses": [1.5, 1.4, 1.45]}"#).1,
            3
        );
        assert!(!looks_like(r#"[{"name": "a", "size": 3}]"#));
    }

    #[test]
    fn per_epoch_lists_become_series_with_nan_kept() {
        let (_d, p) =
            write(r#"{"loss": [0.9, 0.7, NaN], "val_loss": [1.0, 0.8, NaN], "lr": [0.001, 0.001, 0.001]}"#);
        let runs = read(&p).unwrap();
        assert_eq!(runs.len(), 1);
        let run = runs.into_iter().next().unwrap().into_runs().remove(0);
        let loss = run.points(crate::series::Series::TrainLoss);
        assert_eq!(loss.len(), 3);
        assert!(loss[2].value.is_nan());
        assert_eq!(loss[1].step, 1);
        assert_eq!(run.points(crate::series::Series::ValLoss).len(), 3);
    }

    #[test]
    fn a_wrapped_history_takes_its_epochs_and_two_models_are_two_runs() {
        let (_d, p) = write(r#"{"epochs": [5, 6], "metrics": {"loss": [2.0, 1.0]}}"#);
        let run = read(&p).unwrap().remove(0).into_runs().remove(0);
        let steps: Vec<u64> = run
            .points(crate::series::Series::TrainLoss)
            .iter()
            .map(|p| p.step)
            .collect();
        assert_eq!(steps, [5, 6]);
        let (_d, p) = write(
            r#"{"reg_loss": [1.1, 1.0, 1.0], "reg_val_loss": [0.4, 0.3, 0.3],
                "cls_loss": [0.72, 0.70], "cls_val_loss": [0.69, 0.69], "cls_val_accuracy": [0.52, 0.52]}"#,
        );
        let runs = read(&p).unwrap();
        let names: Vec<&str> = runs.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["cls", "reg"]);
        let cls = runs[0].clone().into_runs().remove(0);
        assert_eq!(cls.points(crate::series::Series::ValLoss).len(), 2);
        assert_eq!(cls.points(crate::series::Series::ValAccuracy).len(), 2);
    }

    #[test]
    fn a_runs_config_saved_beside_its_lists_is_its_setup() {
        let (_d, p) = write(
            r#"{"config": {"learning_rate": 0.0003, "epochs": 30, "warmup_epochs": 3},
                "epochs": [1, 2, 3], "train_loss": [2.5, 1.9, 1.6], "val_loss": [2.4, 2.0, 1.8],
                "test_loss": 1.7}"#,
        );
        let run = read(&p).unwrap().remove(0);
        assert_eq!(run.hints.setup.epochs, Some(30.0));
        assert_eq!(run.hints.setup.peak_lr, Some(3e-4));
        let run = run.into_runs().remove(0);
        let steps: Vec<u64> = run
            .points(crate::series::Series::ValLoss)
            .iter()
            .map(|p| p.step)
            .collect();
        assert_eq!(steps, [1, 2, 3]);
    }

    #[test]
    fn a_file_that_is_no_history_says_what_was_expected() {
        let (_d, p) = write(r#"{"note": "text"}"#);
        let e = read(&p).unwrap_err().to_string();
        assert!(e.contains("history.json") && e.contains("per-epoch"), "{e}");
    }
}
