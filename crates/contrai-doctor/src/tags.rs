//! Mapping of framework tags (`eval_loss`, `train/loss`, `val_acc`, ...) to canonical series.

use crate::series::Series;

/// Words of a tag that name a validation metric's role, and a training metric's.
pub(crate) const VAL_WORDS: [&str; 9] = [
    "val",
    "valid",
    "validation",
    "eval",
    "evaluation",
    "test",
    "dev",
    "valloss",
    "vl",
];
pub(crate) const TRAIN_WORDS: [&str; 4] = ["train", "training", "tr", "trn"];

/// Canonical series of a tag and its priority (higher wins when several tags map to one series).
pub fn classify(tag: &str) -> Option<(Series, i32)> {
    let lower = tag.to_ascii_lowercase();
    if lower.ends_with("__min") || lower.ends_with("__max") || lower.starts_with('_') {
        return None;
    }
    let toks = words(&lower);
    if toks.is_empty() {
        return None;
    }
    let has = |w: &str| toks.contains(&w);
    let valish = toks.iter().any(|t| VAL_WORDS.contains(t));
    let trainish = toks.iter().any(|t| TRAIN_WORDS.contains(t));
    let epoch_agg = has("epoch");
    let len_penalty = toks.len() as i32;
    // Skip meta columns that merely contain a metric word.
    if toks.iter().any(|t| {
        matches!(
            *t,
            "runtime" | "samples" | "per" | "second" | "flos" | "count" | "num" | "tokens"
        )
    }) {
        return None;
    }
    if has("lr")
        || lower.contains("learning_rate")
        || lower.contains("learningrate")
        || (has("learning") && has("rate"))
    {
        if valish {
            return None;
        }
        let exact = matches!(lower.as_str(), "lr" | "learning_rate" | "learningrate");
        return Some((Series::Lr, if exact { 100 } else { 50 - len_penalty }));
    }
    if (lower.contains("grad") && lower.contains("norm")) || has("gradnorm") {
        let exact = matches!(lower.as_str(), "grad_norm" | "gradient_norm" | "train/grad_norm");
        return Some((Series::GradNorm, if exact { 100 } else { 50 - len_penalty }));
    }
    // `ls` abbreviates loss only beside a train or validation word (`tr_ls`, `val_ls`).
    let is_loss = toks.iter().any(|t| loss_word(t)) || (has("ls") && (trainish || valish));
    // An error metric (`RMSE`, `val_mae`) stands in for the loss where a log names none: below
    // every tag that does.
    let is_error = !is_loss && names_an_error(&toks);
    if is_loss || is_error {
        let mut prio = 50 - 2 * len_penalty - if is_loss { 0 } else { 40 };
        if epoch_agg {
            prio -= 5;
        }
        if valish {
            if matches!(
                lower.as_str(),
                "val_loss" | "eval_loss" | "valid/loss" | "val/loss"
            ) {
                prio = 100;
            }
            // A validation batch's value is on its loop's own counter: the per-epoch value (the
            // whole set, on the training axis) is the validation loss.
            if on_validation_counter(tag) {
                prio -= 20;
            }
            return Some((Series::ValLoss, prio));
        }
        if matches!(
            lower.as_str(),
            "loss" | "train_loss" | "train/loss" | "training loss" | "training_loss" | "train/loss_step"
        ) {
            prio = 100;
        } else if trainish {
            prio += 20;
        } else if toks
            .iter()
            .any(|t| matches!(*t, "mean" | "total" | "avg" | "average" | "overall"))
        {
            prio += 15;
        }
        return Some((Series::TrainLoss, prio));
    }
    let is_acc = toks
        .iter()
        .any(|t| matches!(*t, "acc" | "accuracy" | "top1" | "bacc" | "bas") || t.ends_with("accuracy"));
    if is_acc {
        let mut prio = 50 - 2 * len_penalty;
        if epoch_agg {
            prio -= 5;
        }
        if valish {
            return Some((Series::ValAccuracy, prio));
        }
        if trainish || matches!(lower.as_str(), "acc" | "accuracy") {
            prio += 20;
        }
        return Some((Series::TrainAccuracy, prio));
    }
    None
}

/// The words of a lower-cased tag (`train/obj_loss`: `train`, `obj`, `loss`).
fn words(lower: &str) -> Vec<&str> {
    lower
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|t| !t.is_empty())
        .collect()
}

/// Whether a tag's words name an error metric (mean squared or absolute error) and no loss.
fn names_an_error(toks: &[&str]) -> bool {
    toks.iter().any(|t| matches!(*t, "mse" | "rmse" | "mae")) && !toks.iter().any(|t| loss_word(t))
}

/// Whether a tag's word names a loss: `loss` and words ending in it (`valloss`), a loop's list
/// of them (`train_losses`), a negative log-likelihood (`nll`).
fn loss_word(t: &str) -> bool {
    t.ends_with("loss") || t.ends_with("losses") || t.ends_with("nll")
}

/// Whether a tag names an error metric and no loss (`RMSE`, `val_mae`): read as the loss only
/// where a log names none, and never a part of one.
pub(crate) fn is_error_metric(tag: &str) -> bool {
    names_an_error(&words(&tag.to_ascii_lowercase()))
}

/// Whether a tag is a validation metric logged per validation batch (Lightning's
/// `val_loss_step`): its step is the validation loop's own counter, not the training step.
pub fn on_validation_counter(tag: &str) -> bool {
    let lower = tag.to_ascii_lowercase();
    let toks: Vec<&str> = lower.split(|c: char| !c.is_ascii_alphanumeric()).collect();
    toks.last() == Some(&"step")
        && toks
            .iter()
            .any(|t| matches!(*t, "val" | "valid" | "validation" | "eval" | "test" | "dev"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_tags() {
        let s = |t: &str| classify(t).map(|x| x.0);
        assert_eq!(s("loss"), Some(Series::TrainLoss));
        assert_eq!(s("train/loss"), Some(Series::TrainLoss));
        assert_eq!(s("training loss"), Some(Series::TrainLoss));
        assert_eq!(s("eval_loss"), Some(Series::ValLoss));
        assert_eq!(s("val_loss"), Some(Series::ValLoss));
        assert_eq!(s("valid/Loss"), Some(Series::ValLoss));
        assert_eq!(s("val_acc"), Some(Series::ValAccuracy));
        assert_eq!(s("accuracy"), Some(Series::TrainAccuracy));
        // Balanced accuracy (scikit-learn's `balanced_accuracy_score`, often `bas` or `bacc`).
        assert_eq!(s("validation_bas"), Some(Series::ValAccuracy));
        assert_eq!(s("train_bacc"), Some(Series::TrainAccuracy));
        assert_eq!(s("learning_rate"), Some(Series::Lr));
        assert_eq!(s("lr-Adam"), Some(Series::Lr));
        assert_eq!(s("grad_norm"), Some(Series::GradNorm));
        assert_eq!(s("train/loss__MIN"), None);
        assert_eq!(s("epoch"), None);
        assert_eq!(s("eval_runtime"), None);
        assert_eq!(s("tr_ls"), Some(Series::TrainLoss));
        assert_eq!(s("val_ls"), Some(Series::ValLoss));
        assert_eq!(s("ls_eps"), None);
        // Tinker's SFT metrics: a per-step batch NLL and an evaluation's; a count is no loss.
        assert_eq!(s("train_mean_nll"), Some(Series::TrainLoss));
        assert_eq!(s("test/nll"), Some(Series::ValLoss));
        assert_eq!(s("num_loss_tokens"), None);
        // A loop's saved lists of losses.
        assert_eq!(s("train_losses"), Some(Series::TrainLoss));
        assert_eq!(s("val_losses"), Some(Series::ValLoss));
        let p = |t: &str| classify(t).map(|x| x.1).unwrap_or(0);
        assert!(p("mean_loss") > p("Conductor_Copper_loss"));
        assert!(p("train_loss_step") > p("train_loss_epoch"));
        assert!(
            p("val_loss_epoch") > p("val_loss_step"),
            "a validation batch's step is its own"
        );
    }
}
