//! Step checkpoints: model, optimizer, counters, data cursor and RNG state, with SHA-256 sums.
//!
//! A checkpoint is written into `checkpoints/.tmp-step-N`, every file fsynced, then renamed to
//! `checkpoints/step-0000000N` in one step: a kill leaves either the whole checkpoint or none.
//! `SHA256SUMS` uses `sha256sum`'s format, so `sha256sum -c SHA256SUMS` checks one by hand.
//!
//! A run stopped by a signal writes a *stop* checkpoint, `checkpoints/stop-0000000N`, of the step
//! it stopped at. Resuming starts from it, but no rule of the lifecycle sees it: rollbacks, the
//! newest-`keep_last` count and the best checkpoints are the scheduled ones (`step-*`) only, so a
//! run stopped and resumed makes the same decisions as one never stopped. The next scheduled
//! checkpoint removes it.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

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
/// Counters, cursor, RNG state and the conductor's state.
pub const STATE: &str = "state.json";
/// Checksums of the other files.
pub const SUMS: &str = "SHA256SUMS";

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

/// Why a checkpoint was written, which decides its directory's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// On the lifecycle's schedule (`step-N`): what rollbacks go back to.
    Scheduled,
    /// Where a stopped run stopped (`stop-N`): only a resume starts from it.
    Stop,
}

impl Kind {
    fn prefix(self) -> &'static str {
        match self {
            Kind::Scheduled => "step-",
            Kind::Stop => "stop-",
        }
    }
}

/// The directory name of step `step`'s scheduled checkpoint.
pub fn dir_name(step: u64) -> String {
    kind_dir_name(Kind::Scheduled, step)
}

/// The directory name of step `step`'s checkpoint of `kind`.
pub fn kind_dir_name(kind: Kind, step: u64) -> String {
    format!("{}{step:08}", kind.prefix())
}

fn hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let io = |e| TrainError::io(path, e);
    let mut f = File::create(path).map_err(io)?;
    f.write_all(bytes).map_err(io)?;
    f.sync_all().map_err(io)
}

fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
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
    std::fs::create_dir_all(root).map_err(|e| TrainError::io(root, e))?;
    let name = kind_dir_name(kind, state.engine.step);
    let tmp = root.join(format!(".tmp-{name}"));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(|e| TrainError::io(&tmp, e))?;
    }
    std::fs::create_dir(&tmp).map_err(|e| TrainError::io(&tmp, e))?;
    let state_json = serde_json::to_vec_pretty(state).map_err(|e| TrainError::Corrupt {
        path: tmp.join(STATE),
        message: e.to_string(),
    })?;
    let mut sums = String::new();
    let core = [(MODEL, model), (OPTIMIZER, optimizer), (STATE, &state_json[..])];
    for &(file, bytes) in core.iter().chain(extra) {
        write_synced(&tmp.join(file), bytes)?;
        sums.push_str(&format!("{}  {file}\n", hex(bytes)));
    }
    write_synced(&tmp.join(SUMS), sums.as_bytes())?;
    sync_dir(&tmp);
    let dest = root.join(&name);
    // A phase boundary rewrites the step's checkpoint: the old one is set aside as a temporary
    // (cleaned up on resume) so that a kill in between leaves the previous checkpoints intact.
    let old = root.join(format!(".tmp-old-{name}"));
    if dest.exists() {
        std::fs::rename(&dest, &old).map_err(|e| TrainError::io(&dest, e))?;
    }
    std::fs::rename(&tmp, &dest).map_err(|e| TrainError::io(&dest, e))?;
    sync_dir(root);
    if old.exists() {
        std::fs::remove_dir_all(&old).map_err(|e| TrainError::io(&old, e))?;
    }
    Ok(dest)
}

/// Scheduled checkpoints under `root`, oldest first.
pub fn list(root: &Path) -> Vec<(u64, PathBuf)> {
    list_kind(root, Kind::Scheduled)
}

/// Checkpoints of `kind` under `root`, oldest first.
pub fn list_kind(root: &Path, kind: Kind) -> Vec<(u64, PathBuf)> {
    let mut out: Vec<(u64, PathBuf)> = std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let step = name.strip_prefix(kind.prefix())?.parse::<u64>().ok()?;
            e.path().is_dir().then_some((step, e.path()))
        })
        .collect();
    out.sort();
    out
}

/// Reads and verifies one checkpoint directory.
pub fn load(dir: &Path) -> Result<Loaded> {
    let bad = |message: String| TrainError::Corrupt {
        path: dir.to_path_buf(),
        message,
    };
    let read = |f: &str| std::fs::read(dir.join(f)).map_err(|e| TrainError::io(dir.join(f), e));
    let sums = String::from_utf8(read(SUMS)?).map_err(|_| bad("SHA256SUMS is not text".into()))?;
    let mut files = std::collections::BTreeMap::new();
    for line in sums.lines() {
        let (sum, file) = line
            .split_once("  ")
            .ok_or_else(|| bad(format!("malformed SHA256SUMS line `{line}`")))?;
        files.insert(file.to_string(), sum.to_string());
    }
    let rest: Vec<String> = files
        .keys()
        .filter(|k| ![MODEL, OPTIMIZER, STATE].contains(&k.as_str()))
        .cloned()
        .collect();
    let mut get = |f: &str| -> Result<Vec<u8>> {
        let want = files
            .remove(f)
            .ok_or_else(|| bad(format!("SHA256SUMS lists no {f}")))?;
        let bytes = read(f)?;
        if hex(&bytes) != want {
            return Err(bad(format!("{f} fails its SHA-256 sum")));
        }
        Ok(bytes)
    };
    let model = get(MODEL)?;
    let optimizer = get(OPTIMIZER)?;
    let raw = get(STATE)?;
    let format = serde_json::from_slice::<serde_json::Value>(&raw)
        .ok()
        .and_then(|v| v["format"].as_u64());
    if format != Some(u64::from(FORMAT)) {
        return Err(bad(format!(
            "checkpoint format {} (this Contrai reads format {FORMAT}): it was written by another version; resume with that version, or start a new run",
            format.map_or("unknown".into(), |f| f.to_string())
        )));
    }
    let state: State = serde_json::from_slice(&raw).map_err(|e| bad(format!("state.json: {e}")))?;
    let mut extra = std::collections::BTreeMap::new();
    for f in rest {
        extra.insert(f.clone(), get(&f)?);
    }
    Ok(Loaded {
        dir: dir.to_path_buf(),
        state,
        model,
        optimizer,
        extra,
    })
}

/// The newest checkpoint of `kinds` that passes its sums (a scheduled one before a stop one of
/// the same step); each one skipped is reported through `warn` and renamed `*.corrupt` so that the
/// step can be written again.
pub fn load_latest(root: &Path, kinds: &[Kind], warn: &mut dyn FnMut(String)) -> Result<Option<Loaded>> {
    let mut all: Vec<(u64, bool, PathBuf)> = kinds
        .iter()
        .flat_map(|&k| {
            list_kind(root, k)
                .into_iter()
                .map(move |(s, d)| (s, k == Kind::Scheduled, d))
        })
        .collect();
    all.sort();
    for (_, _, dir) in all.into_iter().rev() {
        match load(&dir) {
            Ok(l) => return Ok(Some(l)),
            Err(e) => {
                let aside = dir.with_extension("corrupt");
                let _ = std::fs::remove_dir_all(&aside);
                let _ = std::fs::rename(&dir, &aside);
                warn(format!(
                    "skipping checkpoint {}: {e}; trying the previous one",
                    dir.display()
                ));
            }
        }
    }
    Ok(None)
}

/// Removes checkpoints newer than `step` (a resume replays them) and leftover temporaries.
pub fn discard_after(root: &Path, step: u64) -> Result<()> {
    for (s, dir) in list(root).into_iter().chain(list_kind(root, Kind::Stop)) {
        if s > step {
            std::fs::remove_dir_all(&dir).map_err(|e| TrainError::io(&dir, e))?;
        }
    }
    for e in std::fs::read_dir(root).into_iter().flatten().flatten() {
        if e.file_name().to_string_lossy().starts_with(".tmp-") {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
    Ok(())
}

/// Keeps the newest `keep_last` scheduled checkpoints and those of the steps in `keep` (the best
/// ones); removes the rest, and every stop checkpoint (a scheduled one has just superseded it).
pub fn prune(root: &Path, keep_last: usize, keep: &[u64]) -> Result<()> {
    for (_, dir) in list_kind(root, Kind::Stop) {
        std::fs::remove_dir_all(&dir).map_err(|e| TrainError::io(&dir, e))?;
    }
    let all = list(root);
    let cut = all.len().saturating_sub(keep_last);
    for (step, dir) in &all[..cut] {
        if !keep.contains(step) {
            std::fs::remove_dir_all(dir).map_err(|e| TrainError::io(dir, e))?;
        }
    }
    Ok(())
}
