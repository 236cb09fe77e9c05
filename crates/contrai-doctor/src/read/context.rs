//! What the files beside a log say about its run: the task (a classifier and its class count, or
//! a language model) from Hugging Face's `config.json` / `adapter_config.json`, Lightning's
//! `hparams.yaml` and LLaMA-Factory's `training_args.yaml`, in the log's folder or up to
//! [`UP`] folders above it; then, when they say nothing, from the metric names. And the training
//! setup (schedule, warmup, peak LR, batch) from the same arguments files, a Trainer state's
//! batch size and an MLflow run's parameters.

use std::fs;
use std::path::Path;

use serde_json::Value;

use crate::series::{Checkpoint, Run, Series, Task, XUnit};
use crate::stated_setup::Setup;

/// Folders above the log's own that may hold its context (`checkpoint-500/` under the output
/// directory, `version_0/` under `lightning_logs/`).
const UP: usize = 2;

/// Keys of a Lightning `hparams.yaml` that give a classifier's class count.
const CLASS_KEYS: [&str; 6] = [
    "num_classes",
    "n_classes",
    "num_labels",
    "n_labels",
    "nclasses",
    "classes",
];

/// Sets `run.hints.task` (and the class count, when known) from the files beside `log`, else
/// from the run's metric names; a task the reader already knew stays.
pub fn infer(run: &mut Run, log: &Path) {
    let start = if log.is_dir() { Some(log) } else { log.parent() };
    // The log's folder and those above it that may hold its context, nearest first.
    let folders = || start.into_iter().flat_map(Path::ancestors).take(UP + 1);
    if run.hints.task == Task::Unknown {
        let found = folders().find_map(from_folder);
        if let Some((task, classes, from)) = found {
            run.hints.task = task;
            run.hints.task_source = Some(from);
            run.hints.num_classes = run.hints.num_classes.or(classes);
        }
    }
    if run.hints.task == Task::Unknown {
        from_metric_names(run);
    }
    if run.hints.task == Task::LanguageModel {
        run.hints.vocab_size = folders().find_map(vocab_size);
    }
    // The setup: what the reader found in the log itself first, then the files beside it.
    for dir in folders() {
        setup_from_folder(dir, &mut run.hints.setup);
        checkpoints_in(dir, &mut run.hints.checkpoints);
    }
    run.hints.checkpoints.sort_by_key(|c| c.step);
    run.hints.checkpoints.dedup();
    steps_that_count_epochs(run);
}

/// A log on a step axis whose steps count the epochs its files state is on an epoch axis (its
/// patience counts epochs): one loss point at each step from 0 or 1, none past the stated
/// epochs — YOLOv5 logs each epoch at step = the epoch, and no run trains fewer steps than
/// epochs.
fn steps_that_count_epochs(run: &mut Run) {
    let Some(epochs) = run.hints.setup.epochs else {
        return;
    };
    let loss = if run.points(Series::TrainLoss).is_empty() {
        Series::ValLoss
    } else {
        Series::TrainLoss
    };
    let pts = run.points(loss);
    let (Some(first), Some(last)) = (pts.first(), pts.last()) else {
        return;
    };
    let each_step = pts.windows(2).all(|w| w[1].step == w[0].step + 1);
    if run.hints.x_unit == XUnit::Step && first.step <= 1 && each_step && last.step as f64 <= epochs {
        run.hints.x_unit = XUnit::Epoch;
    }
}

/// Adds the checkpoints `dir` holds: a Trainer's `checkpoint-<step>/` folders, Lightning's
/// `checkpoints/*step=<step>*.ckpt` files.
fn checkpoints_in(dir: &Path, out: &mut Vec<Checkpoint>) {
    let names = |d: &Path| -> Vec<String> {
        fs::read_dir(d)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect()
    };
    for name in names(dir) {
        let step = name
            .strip_prefix("checkpoint-")
            .and_then(|s| s.parse::<u64>().ok());
        if let Some(step) = step.filter(|_| dir.join(&name).is_dir()) {
            out.push(Checkpoint { step, name });
        }
    }
    for name in names(&dir.join("checkpoints")) {
        let step = name
            .strip_suffix(".ckpt")
            .and_then(|n| n.split("step=").nth(1))
            .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next()?.parse::<u64>().ok());
        if let Some(step) = step {
            out.push(Checkpoint { step, name });
        }
    }
}

/// A JSON string or number as the text a setting quotes.
pub(crate) fn json_scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Files whose top-level `key: value` lines (YAML) or entries (JSON) are a run's arguments (a
/// Trainer state's batch size is taken by its reader, which parses it anyway); YOLOv5 writes
/// its own as `opt.yaml`.
const ARGUMENT_FILES: [&str; 4] = [
    "training_args.yaml",
    "hparams.yaml",
    "training_args.json",
    "opt.yaml",
];

/// Adds to `setup` what the arguments files of `dir` state (an MLflow run's parameters are
/// its reader's).
fn setup_from_folder(dir: &Path, setup: &mut Setup) {
    for name in ARGUMENT_FILES {
        let Ok(text) = fs::read_to_string(dir.join(name)) else {
            continue;
        };
        if name.ends_with(".json") {
            if let Ok(Value::Object(m)) = serde_json::from_str::<Value>(&text) {
                for (k, v) in &m {
                    if let Some(v) = json_scalar(v) {
                        setup.absorb(k, &v, name);
                    }
                }
            }
            continue;
        }
        for (k, v) in text
            .lines()
            .filter(|l| !l.starts_with([' ', '\t', '#']))
            .filter_map(|l| l.split_once(':'))
        {
            setup.absorb(k.trim(), v.split('#').next().unwrap_or(""), name);
        }
    }
}

/// The task the files of `dir` name, with the class count and the file that said it.
fn from_folder(dir: &Path) -> Option<(Task, Option<u32>, String)> {
    let read = |name: &str| fs::read_to_string(dir.join(name)).ok();
    if let Some(text) = read("config.json")
        && let Some((task, k)) = hf_config(&text)
    {
        return Some((task, k, "config.json".into()));
    }
    if let Some(text) = read("adapter_config.json")
        && let Ok(v) = serde_json::from_str::<Value>(&text)
    {
        match v.get("task_type").and_then(Value::as_str) {
            Some("CAUSAL_LM" | "SEQ_2_SEQ_LM") => {
                return Some((Task::LanguageModel, None, "adapter_config.json".into()));
            }
            Some("SEQ_CLS" | "TOKEN_CLS") => {
                return Some((Task::Classification, None, "adapter_config.json".into()));
            }
            _ => {}
        }
    }
    if let Some(text) = read("hparams.yaml")
        && let Some(k) = yaml_count(&text, &CLASS_KEYS)
    {
        return Some((Task::Classification, Some(k), "hparams.yaml".into()));
    }
    // LLaMA-Factory's arguments or log: every stage (pt, sft, rm, ppo, dpo, kto) trains a
    // language model.
    if read("training_args.yaml").is_some_and(|t| t.lines().any(|l| l.trim_start().starts_with("stage:"))) {
        return Some((Task::LanguageModel, None, "training_args.yaml".into()));
    }
    if read("trainer_log.jsonl")
        .is_some_and(|t| t.lines().next().is_some_and(|l| l.contains("\"current_steps\"")))
    {
        return Some((
            Task::LanguageModel,
            None,
            "LLaMA-Factory's trainer_log.jsonl".into(),
        ));
    }
    None
}

/// The vocabulary size a Hugging Face model config in `dir` states (`vocab_size`, or its text
/// config's in a multimodal one).
fn vocab_size(dir: &Path) -> Option<u64> {
    let v: Value = serde_json::from_str(&fs::read_to_string(dir.join("config.json")).ok()?).ok()?;
    v.get("vocab_size")
        .or_else(|| v.get("text_config").and_then(|t| t.get("vocab_size")))
        .and_then(Value::as_u64)
        .filter(|n| *n >= 2)
}

/// A Hugging Face model config's task: a `…ForCausalLM` / `…LMHeadModel` / generation
/// architecture is a language model; `…ForSequenceClassification` and the like a classifier with
/// `id2label`'s (or `num_labels`') classes.
fn hf_config(text: &str) -> Option<(Task, Option<u32>)> {
    let v: Value = serde_json::from_str(text).ok()?;
    let archs: Vec<&str> = v
        .get("architectures")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let lm = [
        "ForCausalLM",
        "LMHeadModel",
        "ForConditionalGeneration",
        "ForMaskedLM",
    ];
    if archs.iter().any(|a| lm.iter().any(|s| a.ends_with(s))) {
        return Some((Task::LanguageModel, None));
    }
    if archs.iter().any(|a| a.contains("Classification")) {
        // transformers' default when the config names neither: two labels.
        let k = v
            .get("id2label")
            .and_then(Value::as_object)
            .map(|m| m.len() as u64)
            .or_else(|| v.get("num_labels").and_then(Value::as_u64))
            .unwrap_or(2);
        return Some((Task::Classification, u32::try_from(k).ok().filter(|k| *k >= 2)));
    }
    None
}

/// The first of `keys` a YAML file sets at its top level to an integer of 2 or more.
fn yaml_count(text: &str, keys: &[&str]) -> Option<u32> {
    text.lines()
        .filter(|l| !l.starts_with(' ') && !l.starts_with('\t'))
        .filter_map(|l| l.split_once(':'))
        .filter(|(k, _)| keys.contains(&k.trim()))
        .find_map(|(_, v)| v.trim().parse::<u32>().ok().filter(|k| *k >= 2))
}

/// Whether a metric's name is a language model's (perplexity, DPO's rewards and log-probs).
pub(crate) fn names_a_language_model(tag: &str) -> bool {
    let t = tag.to_ascii_lowercase();
    ["perplexity", "ppl", "rewards/", "logps/"]
        .iter()
        .any(|s| t.contains(s))
}

/// A run that logs accuracy is a classifier (a language model's metric names were read with
/// its tags, `RawRun::into_run`).
pub(crate) fn from_metric_names(run: &mut Run) {
    if run.series.contains_key(&Series::TrainAccuracy) || run.series.contains_key(&Series::ValAccuracy) {
        run.hints.task = Task::Classification;
        run.hints.task_source = Some("metric names".into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_names_the_task_and_the_class_count() {
        let cls = r#"{"architectures": ["BertForSequenceClassification"], "id2label": {"0": "a", "1": "b", "2": "c"}}"#;
        assert_eq!(hf_config(cls), Some((Task::Classification, Some(3))));
        let lm = r#"{"architectures": ["LlamaForCausalLM"], "vocab_size": 32000}"#;
        assert_eq!(hf_config(lm), Some((Task::LanguageModel, None)));
        assert_eq!(hf_config(r#"{"model_type": "bert"}"#), None);
    }

    #[test]
    fn hparams_give_the_class_count_at_their_top_level() {
        let text = "lr: 0.001\nmodel:\n  num_classes: 7\nnum_classes: 200\n";
        assert_eq!(yaml_count(text, &CLASS_KEYS), Some(200));
        assert_eq!(yaml_count("num_classes: 1\n", &CLASS_KEYS), None);
    }

    #[test]
    fn checkpoints_are_a_trainers_folders_and_lightnings_step_files() {
        let dir = tempfile::tempdir().unwrap();
        let ckpts = dir.path().join("checkpoints");
        fs::create_dir_all(dir.path().join("checkpoint-500")).unwrap();
        fs::create_dir_all(&ckpts).unwrap();
        fs::write(dir.path().join("checkpoint-9.txt"), "").unwrap();
        fs::write(ckpts.join("epoch=3-step=1200.ckpt"), "").unwrap();
        fs::write(ckpts.join("last.ckpt"), "").unwrap();
        let mut found = Vec::new();
        checkpoints_in(dir.path(), &mut found);
        found.sort_by_key(|c| c.step);
        let steps: Vec<(u64, &str)> = found.iter().map(|c| (c.step, c.name.as_str())).collect();
        assert_eq!(steps, [(500, "checkpoint-500"), (1200, "epoch=3-step=1200.ckpt")]);
    }
}
