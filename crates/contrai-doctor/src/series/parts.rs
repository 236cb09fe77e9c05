//! A loss logged in parts (an object detector's box, objectness and class losses, a
//! multi-task model's tasks): each part's training and validation points beside the main pair.

use super::{Point, Series, eval_set_of};
use crate::tags;

/// One part of a loss logged in parts (an object detector's box, objectness and class losses,
/// a multi-task model's tasks) beside the main pair: its training and validation points, so
/// that a part whose validation worsens is seen where the summed loss hides it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LossPart {
    /// Its name: its tags without their role (`obj_loss` for `train/obj_loss`, `val/obj_loss`).
    pub name: String,
    /// The training points, by step.
    pub train: Vec<Point>,
    /// The validation points, by step.
    pub val: Vec<Point>,
}

/// A loss tag's name without its role and its aggregation (`epoch`, `step`).
fn part_name(tag: &str, role: &[&str]) -> String {
    let lower = tag.to_ascii_lowercase();
    let toks: Vec<&str> = lower
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|t| !t.is_empty() && !role.contains(t) && !matches!(*t, "epoch" | "step"))
        .collect();
    toks.join("_")
}

/// The loss parts of `tags` beside the main pair (`main`: the training and validation loss
/// tags read as the run's): each validation loss tag with a training twin of the same name.
pub(super) fn loss_parts(tags: &[(String, Vec<Point>)], main: [Option<usize>; 2]) -> Vec<LossPart> {
    let is = |i: usize, s: Series| {
        let (tag, points) = &tags[i];
        !points.is_empty() && !tags::is_error_metric(tag) && tags::classify(tag).is_some_and(|(c, _)| c == s)
    };
    let main_names: Vec<String> = main
        .iter()
        .flatten()
        .map(|&i| {
            part_name(
                &tags[i].0,
                &[&tags::VAL_WORDS[..], &tags::TRAIN_WORDS[..]].concat(),
            )
        })
        .collect();
    let sorted = |i: usize| {
        let mut p = tags[i].1.clone();
        p.sort_by_key(|p| p.step);
        p
    };
    let mut parts: Vec<LossPart> = Vec::new();
    for v in (0..tags.len()).filter(|&i| is(i, Series::ValLoss) && Some(i) != main[1]) {
        let tag = &tags[v].0;
        let name = part_name(tag, &tags::VAL_WORDS);
        if tags::on_validation_counter(tag)
            || eval_set_of(tag).is_some()
            || main_names.contains(&name)
            || parts.iter().any(|p| p.name == name)
        {
            continue;
        }
        let twin = (0..tags.len()).find(|&t| {
            Some(t) != main[0]
                && is(t, Series::TrainLoss)
                && part_name(&tags[t].0, &tags::TRAIN_WORDS) == name
        });
        if let Some(t) = twin {
            parts.push(LossPart {
                name,
                train: sorted(t),
                val: sorted(v),
            });
        }
    }
    parts
}
