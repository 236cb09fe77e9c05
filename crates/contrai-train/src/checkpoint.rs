//! The Burn engine's checkpoints: model, optimizer, counters, data cursor and RNG state, in the
//! run format's checkpoint envelope (`contrai_run::envelope`: layout, `SHA256SUMS`, atomic
//! placement, keep-last, verification, the stop kind). This file holds only what the Burn engine
//! puts in it: `model.bpk`, `optimizer.bpk`, `masks.json` and `state.json` (format 3).

use std::path::{Path, PathBuf};

use contrai_run::envelope::{self as envelope, Sealed};
use serde::{Deserialize, Serialize};

use crate::batch::Cursor;
use crate::error::{Result, TrainError};
use crate::model::Classifier;
use crate::prune::Masks;
use contrai_recipe::recipe::Model as ModelSpec;

/// The checkpoint file of the pruning masks.
pub const MASKS: &str = "masks.json";

/// Version of the checkpoint layout (3: the engine's state and the conductor's apart).
pub const FORMAT: u32 = 3;
/// The model's burnpack record.
pub const MODEL: &str = "model.bpk";
/// The optimizer's burnpack record.
pub const OPTIMIZER: &str = "optimizer.bpk";
pub use contrai_run::envelope::{Kind, STATE, SUMS};

/// The RNG state: every random draw after step 0 is a pure function of these numbers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RngState {
    /// The scheme (`splitmix64(seed, step, micro, site)` masks, ChaCha8 epoch permutations).
    pub scheme: String,
    /// The run's seed.
    pub seed: u64,
    /// The step whose masks are drawn next.
    pub next_step: u64,
}

/// What the engine itself carries between steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EngineState {
    /// Optimizer steps done.
    pub step: u64,
    /// Training samples seen.
    pub samples: u64,
    /// The data loader's position.
    pub cursor: Cursor,
    /// RNG state.
    pub rng: RngState,
    /// Training seconds so far.
    pub wall_s: f64,
    /// Bytes of `metrics.jsonl` at this step.
    pub metrics_len: u64,
    /// Bytes of `decisions.jsonl` at this step.
    pub decisions_len: u64,
    /// Bytes of `quarantine.jsonl` at this step (0: none yet, or a checkpoint from before it).
    #[serde(default)]
    pub quarantine_len: u64,
    /// Whether the model holds LoRA adapters (a LoRA fine-tune's validate and main); the record's
    /// layout follows.
    #[serde(default)]
    pub lora: bool,
}

/// Everything but the tensors: `state.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// Layout version ([`FORMAT`]).
    pub format: u32,
    /// The engine's counters and positions.
    pub engine: EngineState,
    /// The conductor's state.
    pub conductor: contrai_lifecycle::State,
}

/// A checkpoint read back and verified.
#[derive(Debug)]
pub struct Loaded {
    /// Its directory.
    pub dir: PathBuf,
    /// Its state.
    pub state: State,
    /// The model record's bytes.
    pub model: Vec<u8>,
    /// The optimizer record's bytes.
    pub optimizer: Vec<u8>,
    /// Further files (the pruning masks), verified like the rest.
    pub extra: std::collections::BTreeMap<String, Vec<u8>>,
}

impl Loaded {
    /// The checkpoint's weights loaded into `model` (the same architecture, `spec`'s), with
    /// adapters attached or merged first so that its layout is the record's.
    pub fn weights_into(&self, model: Classifier, spec: &ModelSpec) -> Result<Classifier> {
        let has = crate::lora::adapters(&model) > 0;
        let model = match (self.state.engine.lora, spec.lora.as_ref()) {
            (false, _) if has => crate::lora::merge(model),
            (true, Some(lora)) if !has => crate::lora::attach(model, lora, 0)?,
            (true, None) => {
                return Err(crate::error::record_err(
                    &self.dir,
                    "it holds LoRA adapters, and the recipe has no [model.lora]",
                ));
            }
            _ => model,
        };
        crate::quantize::load_record(model, self.model.clone(), &self.dir)
    }

    /// The pruning masks it holds (none before contraction).
    pub fn masks(&self) -> Result<Masks> {
        match self.extra.get(MASKS) {
            Some(b) => serde_json::from_slice(b).map_err(|e| crate::error::record_err(&self.dir, e)),
            None => Ok(Masks::default()),
        }
    }
}

/// The directory name of step `step`'s scheduled checkpoint.
pub fn dir_name(step: u64) -> String {
    Kind::Scheduled.dir_name(step)
}

/// Writes the checkpoint of `state`'s step under `root` atomically, with `extra` files beside the model
/// and optimizer; returns its directory.
pub fn save(
    root: &Path,
    kind: Kind,
    state: &State,
    model: &[u8],
    optimizer: &[u8],
    extra: &[(&str, &[u8])],
) -> Result<PathBuf> {
    let state_json = serde_json::to_vec_pretty(state).map_err(|e| TrainError::Corrupt {
        path: root.to_path_buf(),
        message: e.to_string(),
    })?;
    let core = [(MODEL, model), (OPTIMIZER, optimizer), (STATE, &state_json[..])];
    let files: Vec<(&str, &[u8])> = core.into_iter().chain(extra.iter().copied()).collect();
    Ok(envelope::write(root, kind, state.engine.step, &files)?)
}

/// Scheduled checkpoints under `root`, oldest first.
pub fn list(root: &Path) -> Vec<(u64, PathBuf)> {
    envelope::list(root, Kind::Scheduled)
}

/// Reads and verifies one checkpoint directory.
pub fn load(dir: &Path) -> Result<Loaded> {
    let bad = |message: String| TrainError::Corrupt {
        path: dir.to_path_buf(),
        message,
    };
    let sealed = Sealed::open(dir)?;
    let raw = sealed.state()?;
    let format = serde_json::from_slice::<serde_json::Value>(&raw)
        .ok()
        .and_then(|v| v["format"].as_u64());
    if format != Some(u64::from(FORMAT)) || !sealed.has(MODEL) {
        return Err(bad(format!(
            "checkpoint format {} (this Contrai's Burn engine reads format {FORMAT}): it was written by another version or engine; resume with that one, or start a new run",
            format.map_or("unknown".into(), |f| f.to_string())
        )));
    }
    let state: State = serde_json::from_slice(&raw).map_err(|e| bad(format!("state.json: {e}")))?;
    let mut extra = std::collections::BTreeMap::new();
    for f in sealed.files().filter(|f| ![MODEL, OPTIMIZER, STATE].contains(f)) {
        extra.insert(f.to_string(), sealed.read(f)?);
    }
    Ok(Loaded {
        dir: dir.to_path_buf(),
        state,
        model: sealed.read(MODEL)?,
        optimizer: sealed.read(OPTIMIZER)?,
        extra,
    })
}

/// The newest checkpoint of `kinds` that passes its sums (a scheduled one before a stop one of
/// the same step); each one skipped is reported through `warn` and set aside as `*.corrupt` so
/// that the step can be written again.
pub fn load_latest(root: &Path, kinds: &[Kind], warn: &mut dyn FnMut(String)) -> Result<Option<Loaded>> {
    load_latest_below(root, kinds, u64::MAX, warn)
}

/// [`load_latest`] preferring the checkpoints of steps below `below` (the newest of the rest when
/// none of those loads).
pub fn load_latest_below(
    root: &Path,
    kinds: &[Kind],
    below: u64,
    warn: &mut dyn FnMut(String),
) -> Result<Option<Loaded>> {
    let (found, refused) = envelope::latest_below(root, kinds, below, |_, dir| load(dir));
    for (_, dir, e) in refused {
        envelope::set_aside(&dir);
        warn(format!(
            "skipping checkpoint {}: {e}; trying the previous one",
            dir.display()
        ));
    }
    Ok(found)
}

/// Removes checkpoints newer than `step` (a resume replays them) and leftover temporaries.
pub fn discard_after(root: &Path, step: u64) -> Result<()> {
    Ok(envelope::discard_after(root, step)?)
}

/// Keeps the newest `keep_last` scheduled checkpoints and those of the steps in `keep` (the best
/// ones); removes the rest, and every stop checkpoint (a scheduled one has just superseded it).
pub fn prune(root: &Path, keep_last: usize, keep: &[u64]) -> Result<()> {
    Ok(envelope::keep_last(root, keep_last, keep)?)
}
