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

/// The arithmetic of the training step's matrix products.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
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
pub enum Precision {
    /// Every product in f32.
    #[default]
    F32,
    /// The products' operands rounded to bf16 and summed in f32 (CPUs with AVX512-BF16); the
    /// master weights, the optimizer and everything outside the products in f32.
    Bf16,
}

impl Precision {
    /// Whether this is the default, f32 (a recipe that leaves it out writes nothing).
    pub fn is_f32(&self) -> bool {
        *self == Precision::F32
    }
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
/// A weight-only quantized variant of the final model (one entry of `refine.quantize`).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
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
    /// 8-bit weight codes, one scale a matrix or a block of a row.
    Int8,
    /// 4-bit weight codes, one scale a block of a row (an engine that has no int4 declines it).
    Int4,
}

/// `refine.quantize`: the quantized variants refine makes, in order, each kept or refused on its
/// own — `"int8"`, `"int4"`, `"none"`, or a list (`["int8", "int4"]`; `[]` is `"none"`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Quantizations(Vec<Quantize>);

/// How `refine.quantize` says that no quantized variant is made.
const NO_QUANTIZATION: &str = "none";

impl Quantizations {
    /// These variants, in this order (each once).
    pub fn new(variants: impl IntoIterator<Item = Quantize>) -> Self {
        let mut v: Vec<Quantize> = Vec::new();
        for q in variants {
            if !v.contains(&q) {
                v.push(q);
            }
        }
        Quantizations(v)
    }

    /// The variants in the order refine makes them.
    pub fn iter(&self) -> impl Iterator<Item = Quantize> + '_ {
        self.0.iter().copied()
    }

    /// The variant made after `done` (the first when `done` is None).
    pub fn after(&self, done: Option<Quantize>) -> Option<Quantize> {
        match done {
            None => self.0.first().copied(),
            Some(d) => self.iter().skip_while(|q| *q != d).nth(1),
        }
    }

    /// `recipe init`'s list of the values allowed.
    pub fn choices() -> String {
        format!("{} | {NO_QUANTIZATION}", choices::<Quantize>())
    }
}

impl Serialize for Quantizations {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0.as_slice() {
            [] => s.serialize_str(NO_QUANTIZATION),
            [one] => one.serialize(s),
            many => many.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Quantizations {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(QuantizationsVisitor)
    }
}

struct QuantizationsVisitor;

impl<'de> serde::de::Visitor<'de> for QuantizationsVisitor {
    type Value = Quantizations;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "one of {} or a list of them", Quantizations::choices())
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Quantizations, E> {
        if v == NO_QUANTIZATION {
            return Ok(Quantizations::default());
        }
        let q = v.parse().map_err(|_| {
            E::custom(format!(
                "unknown value `{v}`, expected {}",
                Quantizations::choices()
            ))
        })?;
        Ok(Quantizations::new([q]))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Quantizations, A::Error> {
        let mut v = Vec::new();
        while let Some(q) = seq.next_element::<Quantize>()? {
            if v.contains(&q) {
                return Err(serde::de::Error::custom(format!("`{q}` is listed twice")));
            }
            v.push(q);
        }
        Ok(Quantizations(v))
    }
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

    #[derive(Debug, Deserialize, Serialize)]
    struct Refine {
        quantize: Quantizations,
    }

    fn read(v: &str) -> Result<Vec<Quantize>, String> {
        toml::from_str::<Refine>(&format!("quantize = {v}"))
            .map(|r| r.quantize.iter().collect())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn refine_quantize_is_one_variant_none_or_a_list_and_writes_back_alike() {
        use Quantize::*;
        assert_eq!(read("\"int8\""), Ok(vec![Int8]));
        assert_eq!(read("\"none\""), Ok(vec![]));
        assert_eq!(read("[]"), Ok(vec![]));
        assert_eq!(read("[\"int8\", \"int4\"]"), Ok(vec![Int8, Int4]));
        let e = read("\"int3\"").unwrap_err();
        assert!(e.contains("expected int8 | int4 | none"), "{e}");
        let e = read("[\"int4\", \"int4\"]").unwrap_err();
        assert!(e.contains("`int4` is listed twice"), "{e}");
        for v in ["\"none\"", "\"int4\"", "[\"int8\", \"int4\"]"] {
            let r: Refine = toml::from_str(&format!("quantize = {v}")).unwrap();
            assert_eq!(toml::to_string(&r).unwrap().trim(), format!("quantize = {v}"));
        }
        let both = Quantizations::new([Int8, Int4]);
        assert_eq!(both.after(None), Some(Int8));
        assert_eq!(both.after(Some(Int8)), Some(Int4));
        assert_eq!(both.after(Some(Int4)), None);
    }
}
