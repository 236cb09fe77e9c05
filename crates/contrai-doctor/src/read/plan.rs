//! What a log's records say of their run's course — the step, the steps planned, the epoch
//! reached — to tell a job launched again into the same log (JSON lines, a Trainer state).

/// A record's step, planned steps and epoch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Plan {
    pub step: u64,
    pub total: Option<u64>,
    pub epoch: Option<f64>,
}

impl Plan {
    /// Whether `next`, a later record, belongs to a job launched again: one process keeps its
    /// planned steps, and its epoch never goes back (by more than the log's rounding) while its
    /// steps go on (a resume from an earlier checkpoint takes both back: the steps tell that).
    pub fn relaunched(self, next: Plan) -> bool {
        let total = matches!((self.total, next.total), (Some(a), Some(b)) if a != b);
        let epoch = matches!((self.epoch, next.epoch), (Some(a), Some(b)) if b < a - 0.01);
        total || (epoch && next.step > self.step)
    }

    /// Whether `next` is an evaluation after the run (LLaMA-Factory's `do_eval` or `do_predict`
    /// on the final or reloaded best model), no point of its course: this record reached its
    /// planned steps and `next`, which logs no training loss (`trains`: a non-null `loss`),
    /// counts its evaluation batches against a plan of its own.
    pub fn evaluated_after(self, next: Plan, trains: bool) -> bool {
        let done = self.total == Some(self.step);
        done && !trains && next.total.is_some() && next.total != self.total
    }
}
