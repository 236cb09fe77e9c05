//! The training setup a run's own files state — its LR schedule, warmup, peak LR and batch — read
//! where the log does not show them (no LR logged), and quoted as evidence.

use serde::Serialize;

/// An LR schedule as a run's arguments name it (`lr_scheduler_type`, `scheduler`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LrSchedule {
    /// The LR never changes.
    Constant,
    /// A warmup, then constant.
    ConstantWithWarmup,
    /// Linear decay to zero.
    Linear,
    /// Cosine decay.
    Cosine,
    /// Cosine decay with hard restarts.
    CosineWithRestarts,
    /// Polynomial decay.
    Polynomial,
    /// 1/sqrt(step) decay.
    InverseSqrt,
    /// Cut when a metric stops improving.
    ReduceOnPlateau,
    /// A schedule the doctor does not know.
    Other,
}

impl LrSchedule {
    /// Reads a schedule's name (`cosine`, `SchedulerType.COSINE`, `CosineAnnealingLR`).
    pub fn parse(name: &str) -> LrSchedule {
        let n = name.trim().trim_matches(['"', '\'']).to_ascii_lowercase();
        let n = n.strip_prefix("schedulertype.").unwrap_or(&n);
        match n {
            "constant" | "none" => LrSchedule::Constant,
            "constant_with_warmup" => LrSchedule::ConstantWithWarmup,
            "linear" => LrSchedule::Linear,
            "cosine_with_restarts" | "cosineannealingwarmrestarts" => LrSchedule::CosineWithRestarts,
            "polynomial" => LrSchedule::Polynomial,
            "inverse_sqrt" => LrSchedule::InverseSqrt,
            "reduce_lr_on_plateau" | "reducelronplateau" | "plateau" => LrSchedule::ReduceOnPlateau,
            n if n.starts_with("cosine") => LrSchedule::Cosine,
            _ => LrSchedule::Other,
        }
    }

    /// Whether the LR falls over the run under this schedule (`None`: it depends on the run).
    pub fn decays(self) -> Option<bool> {
        match self {
            LrSchedule::Constant | LrSchedule::ConstantWithWarmup => Some(false),
            LrSchedule::Linear
            | LrSchedule::Cosine
            | LrSchedule::CosineWithRestarts
            | LrSchedule::Polynomial
            | LrSchedule::InverseSqrt => Some(true),
            LrSchedule::ReduceOnPlateau | LrSchedule::Other => None,
        }
    }
}

/// One setting a run's own files state, quoted as read.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Setting {
    /// The key, as the file spells it.
    pub key: String,
    /// The value, as the file writes it.
    pub value: String,
    /// The file (or folder, for MLflow's parameters) it was read from.
    pub file: String,
}

/// The training setup a run's files state; every field from the first file that sets it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Setup {
    /// The LR schedule.
    pub schedule: Option<LrSchedule>,
    /// Warmup as a share of the run.
    pub warmup_ratio: Option<f64>,
    /// Warmup in steps.
    pub warmup_steps: Option<u64>,
    /// Warmup in epochs (Lightning modules' `warmup_epochs`).
    pub warmup_epochs: Option<f64>,
    /// The epochs the run was set to train for.
    pub epochs: Option<f64>,
    /// The peak (configured) learning rate.
    pub peak_lr: Option<f64>,
    /// The batch size per device (or in all, when the file does not split it).
    pub batch_size: Option<u32>,
    /// Gradient accumulation steps.
    pub grad_accumulation: Option<u32>,
    /// The settings each field came from.
    pub settings: Vec<Setting>,
}

impl Setup {
    /// Whether no file said anything.
    pub fn is_empty(&self) -> bool {
        self.settings.is_empty()
    }

    /// The setting a field was read from, by key.
    pub fn setting(&self, keys: &[&str]) -> Option<&Setting> {
        self.settings.iter().find(|s| keys.contains(&s.key.as_str()))
    }

    /// Takes one `key: value` a file states, when the key is one the doctor reads and the field
    /// is not set yet. Returns whether it was taken.
    pub fn absorb(&mut self, key: &str, value: &str, file: &str) -> bool {
        let v = value.trim().trim_matches(['"', '\'']);
        let num = || v.parse::<f64>().ok().filter(|x| x.is_finite() && *x >= 0.0);
        let count = || num().filter(|x| x.fract() == 0.0 && *x >= 1.0).map(|x| x as u32);
        let taken = match key {
            k if SCHEDULE_KEYS.contains(&k) && self.schedule.is_none() && !v.is_empty() => {
                self.schedule = Some(LrSchedule::parse(v));
                true
            }
            "warmup_ratio" if self.warmup_ratio.is_none() => {
                self.warmup_ratio = num().filter(|r| *r > 0.0 && *r < 1.0);
                self.warmup_ratio.is_some()
            }
            "warmup_steps" if self.warmup_steps.is_none() => {
                self.warmup_steps = count().map(u64::from);
                self.warmup_steps.is_some()
            }
            "warmup_epochs" if self.warmup_epochs.is_none() => {
                self.warmup_epochs = num().filter(|e| *e > 0.0);
                self.warmup_epochs.is_some()
            }
            k if EPOCH_KEYS.contains(&k) && self.epochs.is_none() => {
                self.epochs = num().filter(|e| *e >= 1.0);
                self.epochs.is_some()
            }
            k if LR_KEYS.contains(&k) && self.peak_lr.is_none() => {
                self.peak_lr = num().filter(|x| *x > 0.0);
                self.peak_lr.is_some()
            }
            k if BATCH_KEYS.contains(&k) && self.batch_size.is_none() => {
                self.batch_size = count();
                self.batch_size.is_some()
            }
            "gradient_accumulation_steps" | "accumulate_grad_batches" if self.grad_accumulation.is_none() => {
                self.grad_accumulation = count();
                self.grad_accumulation.is_some()
            }
            _ => false,
        };
        if taken {
            self.settings.push(Setting {
                key: key.to_string(),
                value: v.to_string(),
                file: file.to_string(),
            });
        }
        taken
    }

    /// The warmup's share of a run of `total` steps, when the files state it (as a ratio, in
    /// steps, or in epochs beside the epochs the run was set to; above 1 when the run ends
    /// inside its warmup).
    pub fn warmup_share(&self, total: Option<u64>) -> Option<f64> {
        let by_steps = || Some(self.warmup_steps? as f64 / total.filter(|t| *t > 0)? as f64);
        let by_epochs = || Some(self.warmup_epochs? / self.epochs?);
        self.warmup_ratio.or_else(by_steps).or_else(by_epochs)
    }

    /// "batch 8 x 4 accumulated = 32", when the batch is known.
    pub fn batch_line(&self) -> Option<String> {
        let b = self.batch_size?;
        Some(match self.grad_accumulation.filter(|a| *a > 1) {
            Some(a) => format!("batch {b} x {a} accumulated = {}", b * a),
            None => format!("batch {b}"),
        })
    }
}

/// Keys that name the LR schedule.
pub const SCHEDULE_KEYS: [&str; 4] = ["lr_scheduler_type", "lr_scheduler", "scheduler", "lr_schedule"];
/// Keys that give the peak learning rate.
const LR_KEYS: [&str; 4] = ["learning_rate", "lr", "opt_learning_rate", "max_lr"];
/// Keys that give the epochs a run is set to train for.
pub const EPOCH_KEYS: [&str; 4] = ["max_epochs", "num_train_epochs", "epochs", "num_epochs"];
/// Keys that give the batch size.
const BATCH_KEYS: [&str; 3] = ["per_device_train_batch_size", "train_batch_size", "batch_size"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_are_read_under_their_many_spellings() {
        assert_eq!(LrSchedule::parse("SchedulerType.COSINE"), LrSchedule::Cosine);
        assert_eq!(LrSchedule::parse("'constant'"), LrSchedule::Constant);
        assert_eq!(LrSchedule::parse("cosine_with_min_lr"), LrSchedule::Cosine);
        assert_eq!(
            LrSchedule::parse("ReduceLROnPlateau"),
            LrSchedule::ReduceOnPlateau
        );
        assert_eq!(LrSchedule::parse("warmup_stable_decay"), LrSchedule::Other);
    }

    #[test]
    fn the_first_file_to_set_a_field_wins_and_is_quoted() {
        let mut s = Setup::default();
        assert!(s.absorb("lr_scheduler_type", "constant", "training_args.yaml"));
        assert!(!s.absorb("lr_scheduler_type", "cosine", "hparams.yaml"));
        assert!(s.absorb("per_device_train_batch_size", "8", "a"));
        assert!(s.absorb("gradient_accumulation_steps", "4", "a"));
        assert!(
            !s.absorb("warmup_ratio", "1.5", "a"),
            "a ratio above 1 is no share"
        );
        assert_eq!(s.schedule, Some(LrSchedule::Constant));
        assert_eq!(s.batch_line().as_deref(), Some("batch 8 x 4 accumulated = 32"));
        assert_eq!(
            s.setting(&["lr_scheduler_type"]).map(|x| x.file.as_str()),
            Some("training_args.yaml")
        );
    }
}
