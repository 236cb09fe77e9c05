//! Checkpoints as the conductor asks for them: written (the engine's counters beside the
//! conductor's state), restored (weights only, or everything), and the round trip that proves
//! the format before main.

use std::path::PathBuf;
use std::time::Instant;

use contrai_lifecycle::{Observation, RestorePoint, RestoreScope};
use contrai_recipe::Phase;

use crate::checkpoint::{self, FORMAT, Kind, MASKS, State};
use crate::engine::Engine;
use crate::error::{Result, TrainError, record_err};
use crate::quantize::record_bytes;

impl Engine<'_> {
    /// Writes a checkpoint of this step holding `conductor` (the journals synced first; the
    /// newest `run.keep_last` and the steps in `keep` kept).
    pub(crate) fn checkpoint(&mut self, conductor: contrai_lifecycle::State, keep: &[u64]) -> Result<()> {
        let t = Instant::now();
        self.save_checkpoint(Kind::Scheduled, conductor)?;
        checkpoint::prune(&self.run.checkpoints(), self.recipe.run.keep_last as usize, keep)?;
        self.checkpoint_timed(t);
        Ok(())
    }

    /// The checkpoint a stopped run resumes from: this step's scheduled one when it was just
    /// written, else a stop checkpoint holding `conductor`, verified by reading it back.
    pub(crate) fn stop_checkpoint(&mut self, conductor: contrai_lifecycle::State) -> Result<PathBuf> {
        let root = self.run.checkpoints();
        let scheduled = root.join(checkpoint::dir_name(self.step));
        if checkpoint::load(&scheduled).is_ok_and(|l| l.state.conductor == conductor) {
            return Ok(scheduled);
        }
        let dir = self.save_checkpoint(Kind::Stop, conductor)?;
        checkpoint::load(&dir)?;
        Ok(dir)
    }

    /// Writes this step's checkpoint of `kind`; returns its directory.
    fn save_checkpoint(&mut self, kind: Kind, conductor: contrai_lifecycle::State) -> Result<PathBuf> {
        if conductor.step != self.step {
            return Err(contrai_lifecycle::ConductorError::Protocol(format!(
                "a checkpoint of step {} asked at step {}",
                conductor.step, self.step
            ))
            .into());
        }
        let root = self.run.checkpoints();
        let state = State {
            format: FORMAT,
            engine: self.engine_state(self.journal.sync()?),
            conductor,
        };
        let (model, optim) = self.snapshot(&root)?;
        let masks = match self.net.masks.is_empty() {
            true => Vec::new(),
            false => serde_json::to_vec(&self.net.masks).map_err(|e| record_err(&root, e))?,
        };
        let extra: &[(&str, &[u8])] = if masks.is_empty() { &[] } else { &[(MASKS, &masks)] };
        checkpoint::save(&root, kind, &state, &model, &optim, extra)
    }

    /// The model's and the optimizer's records as bytes (`path` names them in errors).
    fn snapshot(&self, path: &std::path::Path) -> Result<(Vec<u8>, Vec<u8>)> {
        let optim = self.net.optim.into_bytes().map_err(|e| record_err(path, e))?;
        Ok((record_bytes(&self.net.model)?, optim.to_vec()))
    }

    /// Restores a checkpoint: the weights, optimizer and masks (the sparsity series shows masks
    /// going back), or everything — `metrics.jsonl` cut back to it, later checkpoints removed.
    pub(crate) fn restore(&mut self, to: RestorePoint, scope: RestoreScope) -> Result<Observation> {
        let root = self.run.checkpoints();
        let l = match to {
            RestorePoint::Latest | RestorePoint::Before(_) => {
                let below = match to {
                    RestorePoint::Before(step) => step,
                    _ => u64::MAX,
                };
                let journal = &self.journal;
                checkpoint::load_latest_below(&root, &[Kind::Scheduled], below, &mut |w| journal.warn(&w))?
                    .ok_or_else(|| TrainError::Diverged("no checkpoint to roll back to".into()))?
            }
            RestorePoint::Step(step) => checkpoint::load(&root.join(checkpoint::dir_name(step)))?,
        };
        let pruned = !self.net.masks.is_empty();
        let metrics_len = l.state.engine.metrics_len;
        let everything = scope == RestoreScope::Everything;
        let state = self.load(l, everything)?;
        let history = if everything {
            self.journal.cut_metrics(metrics_len)?;
            checkpoint::discard_after(&root, self.step)?;
            self.history(metrics_len)?
        } else {
            if pruned {
                self.record_sparsity()?;
            }
            Vec::new()
        };
        Ok(Observation::Restored {
            state: Box::new(state),
            history,
        })
    }

    /// Writes a checkpoint of the fresh model to scratch, verifies and reads it back, and
    /// compares the outputs of the model read back with the original's.
    pub(crate) fn round_trip(&mut self) -> Result<Observation> {
        let scratch = self.run.checkpoints().join(".tmp-round-trip");
        let (model, optim) = self.snapshot(&scratch)?;
        // A scratch checkpoint, never resumed from: the conductor's part is a placeholder.
        let state = State {
            format: FORMAT,
            engine: self.engine_state((0, 0, 0)),
            conductor: contrai_lifecycle::State::fresh(Phase::Main),
        };
        let dir = checkpoint::save(&scratch, Kind::Scheduled, &state, &model, &optim, &[])?;
        let back = checkpoint::load(&dir)?;
        let before = self.probe_logits();
        self.load(back, false)?;
        let identical = before == self.probe_logits();
        std::fs::remove_dir_all(&scratch).map_err(|e| TrainError::io(&scratch, e))?;
        Ok(Observation::RoundTripped {
            identical,
            model_bytes: model.len(),
            optimizer_bytes: optim.len(),
        })
    }

    /// The logits of the first validation samples (a fingerprint of the weights).
    fn probe_logits(&self) -> Vec<f32> {
        let n = self.data.val.len().min(8);
        if n == 0 {
            return Vec::new();
        }
        let rows: Vec<usize> = (0..n).collect();
        let b = self.data.val.batch(&rows, &self.plain);
        use burn::module::Module;
        self.net
            .model
            .valid()
            .forward(&b, None)
            .into_data()
            .try_to_vec::<f32>()
            .unwrap_or_default()
    }
}
