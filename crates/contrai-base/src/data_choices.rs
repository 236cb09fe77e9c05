//! Choices named by several layers (the recipe, the data stage, the CLI), each a fixed set of
//! values with one spelling.

use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The formats Contrai reads, as the user names them.
pub const FORMATS: &str = "jsonl, csv, tsv or parquet";

/// A dataset's on-disk format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// One JSON object a line.
    Jsonl,
    /// Comma-separated values (RFC 4180: double quotes around fields that need them).
    Csv,
    /// Tab-separated values (IANA: no quoting; a field holds no tab and no line break).
    Tsv,
    /// Apache Parquet.
    Parquet,
}

impl Format {
    /// The format a file extension (lower case, no dot) names, if any.
    pub fn from_extension(ext: &str) -> Option<Format> {
        match ext {
            "jsonl" | "ndjson" | "json" => Some(Format::Jsonl),
            "csv" => Some(Format::Csv),
            "tsv" | "tab" => Some(Format::Tsv),
            "parquet" | "pq" => Some(Format::Parquet),
            _ => None,
        }
    }

    /// The extension written for this format.
    pub fn extension(self) -> &'static str {
        match self {
            Format::Jsonl => "jsonl",
            Format::Csv => "csv",
            Format::Tsv => "tsv",
            Format::Parquet => "parquet",
        }
    }

    /// Whether rows are delimited text (CSV or TSV), the formats that may lack a header row.
    pub fn is_delimited(self) -> bool {
        matches!(self, Format::Csv | Format::Tsv)
    }
}

impl FromStr for Format {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "jsonl" | "ndjson" => Ok(Format::Jsonl),
            "csv" => Ok(Format::Csv),
            "tsv" => Ok(Format::Tsv),
            "parquet" => Ok(Format::Parquet),
            other => Err(format!("unknown format `{other}`: expected {FORMATS}")),
        }
    }
}

/// What to do with a cluster whose members disagree on the label.
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
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum OnConflict {
    /// Drop the whole cluster.
    Drop,
    /// Keep the members with the majority label; drop the cluster on a tie.
    Majority,
    /// Keep every member.
    Keep,
}

/// Which duplicates to drop from the output (clusters always stay in one partition).
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
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum Dedup {
    /// Keep one sample of each identical normalised text.
    Exact,
    /// Keep one sample of each near-duplicate cluster.
    Near,
    /// Keep every sample.
    None,
}
