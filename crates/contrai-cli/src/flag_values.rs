//! Flags whose values are a fixed set, parsed into the type that defines the set: `--help` lists
//! the values and a typo is refused with them, from the same list the recipe file uses.

use std::str::FromStr;

use clap::builder::{PossibleValuesParser, TypedValueParser};

/// A value parser for a type whose values strum lists.
pub fn choice<T>() -> impl TypedValueParser<Value = T>
where
    T: strum::VariantNames + FromStr + Clone + Send + Sync + 'static,
    <T as FromStr>::Err: std::error::Error + Send + Sync + 'static,
{
    PossibleValuesParser::new(T::VARIANTS).try_map(|s| s.parse::<T>())
}
