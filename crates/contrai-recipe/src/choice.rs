//! The recipe's settings with a fixed set of values, each list written once: serde reads and
//! writes them (an unknown value is refused with the nearest valid one), strum lists them for
//! `recipe init`'s comments and the CLI's flags.

use serde::{Deserialize, Serialize};
use strum::VariantNames;

pub use contrai_base::{Dedup, OnConflict};

/// A lifecycle phase. The order of the variants is the only order phases run in.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    strum::Display,
    strum::EnumString,
    strum::VariantNames,
    strum::EnumIter,
    strum::AsRefStr,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum Phase {
    /// Prove the pipeline before the main compute is spent.
    Validate,
    /// The main training, watched by the live doctor.
    Main,
    /// Read the run and measure pruning sensitivity before contracting.
    Diagnose,
    /// Tighten the converged model under guards.
    Contract,
    /// The final anneal, int8, the student and the single holdout read.
    Refine,
}

impl Phase {
    /// Every phase, in order.
    pub fn all() -> Vec<Phase> {
        <Phase as strum::IntoEnumIterator>::iter().collect()
    }

    /// Whether optimizer steps train the model in this phase (not validate's check, not diagnose).
    pub fn trains(self) -> bool {
        matches!(self, Phase::Main | Phase::Contract | Phase::Refine)
    }
}

/// The model a run trains.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::Display,
    strum::EnumString,
    strum::VariantNames,
    strum::AsRefStr,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum ModelKind {
    /// A pre-LayerNorm transformer classifier on text.
    Transformer,
    /// A multi-layer perceptron on numeric features.
    Mlp,
    /// A pretrained BERT-family encoder (`model.pretrained`: a Hugging Face model directory) with
    /// a fresh classification head.
    Bert,
}

/// How a pretrained encoder's hidden states become the classification head's input.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    Serialize,
    Deserialize,
    strum::Display,
    strum::EnumString,
    strum::VariantNames,
    strum::AsRefStr,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum Pooling {
    /// The [CLS] token through the checkpoint's pooler (Hugging Face's sequence classifier).
    #[default]
    Cls,
    /// The mean of the real tokens (what sentence encoders such as all-MiniLM were trained for).
    Mean,
}

/// Where one magnitude threshold applies when pruning.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::Display,
    strum::EnumString,
    strum::VariantNames,
    strum::AsRefStr,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum PruneScope {
    /// Each module pruned to its own target.
    Module,
    /// One threshold over every selected module, removing as many weights as the modules' targets
    /// add up to; a module reaching its cap is held there (PyTorch's `global_unstructured`, with caps).
    Global,
}

/// How sparsity grows from a prune rule's `init` to its `final`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::Display,
    strum::EnumString,
    strum::VariantNames,
    strum::AsRefStr,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum PruneSchedule {
    /// Zhu & Gupta's `s_f + (s_i − s_f)(1 − p)³`: fast early, gentle as the model settles.
    Cubic,
    /// A straight line.
    Linear,
}

/// Post-training quantization in refine.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::Display,
    strum::EnumString,
    strum::VariantNames,
    strum::AsRefStr,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum Quantize {
    /// Int8 weights with one scale a matrix (or a block of a row).
    Int8,
    /// The model stays f32.
    None,
}

/// A type's values as `a | b | c` (for comments and help).
pub fn choices<T: VariantNames>() -> String {
    T::VARIANTS.join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// serde (the recipe file) and strum (lists, flags) must spell every value alike.
    fn same_spelling<T>()
    where
        T: VariantNames + std::str::FromStr + Serialize,
        <T as std::str::FromStr>::Err: std::fmt::Debug,
    {
        for name in T::VARIANTS {
            let v: T = name.parse().unwrap();
            assert_eq!(serde_json::to_value(&v).unwrap(), serde_json::json!(name));
        }
    }

    #[test]
    fn serde_and_strum_agree_on_every_value() {
        same_spelling::<Phase>();
        same_spelling::<ModelKind>();
        same_spelling::<Pooling>();
        same_spelling::<PruneScope>();
        same_spelling::<PruneSchedule>();
        same_spelling::<Quantize>();
        same_spelling::<Dedup>();
        same_spelling::<OnConflict>();
        same_spelling::<crate::Decay>();
        assert_eq!(
            choices::<Phase>(),
            "validate | main | diagnose | contract | refine"
        );
        assert!(Phase::Validate < Phase::Refine);
    }
}
