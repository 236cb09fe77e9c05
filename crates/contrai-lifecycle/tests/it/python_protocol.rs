//! The Python package's typed protocol (`crates/contrai-py/python/contrai/protocol.py`) is
//! generated from the conductor's Rust types: their JSON Schemas (schemars) become `TypedDict`s,
//! `Literal`s and unions. This test writes what the types say now and fails when the checked-in
//! file differs (`CONTRAI_BLESS=1` rewrites it), so the two sides cannot drift apart.

#![cfg(feature = "schema")]

use std::fmt::Write;

use contrai_lifecycle::{Observation, RunInfo, Turn};
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value};

const FILE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../contrai-py/python/contrai/protocol.py"
);

const HEADER: &str = r#""""The conductor's protocol as Python types: the turns it answers with (``Turn``: ``Action``s and
one ``Request``) and the observations it takes (``Observation``), plus what they hold, and the
record a checkpoint keeps beside its tensors (``CheckpointRecord``).

Generated from the Rust types (``contrai_lifecycle::protocol`` and what it names) by
``crates/contrai-lifecycle/tests/it/python_protocol.rs``; do not edit: change the Rust type, then
run that test with ``CONTRAI_BLESS=1``. Serde's forms: a unit variant is its name as a string
(``"RoundTrip"``), any other variant a one-key dict (``{"Train": {...}}``); a measured value that
is not finite arrives as the word ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``.
"""

from __future__ import annotations

from typing import Any, Literal, Union

from typing_extensions import NotRequired, TypedDict
"#;

/// Python source for every definition the protocol's types need.
struct Python {
    defs: Map<String, Value>,
    out: String,
}

impl Python {
    /// The Python type expression of a schema; object schemas with properties become classes
    /// named `name`.
    fn ty(&mut self, schema: &Value, name: &str) -> String {
        let Some(obj) = schema.as_object() else {
            return "Any".into();
        };
        if let Some(r) = obj.get("$ref").and_then(Value::as_str) {
            return format!("\"{}\"", r.rsplit('/').next().unwrap_or(r));
        }
        if let Some(c) = obj.get("const") {
            return format!("Literal[{c}]");
        }
        if let Some(vals) = obj.get("enum").and_then(Value::as_array) {
            let v: Vec<String> = vals.iter().map(Value::to_string).collect();
            return format!("Literal[{}]", v.join(", "));
        }
        for key in ["oneOf", "anyOf"] {
            if let Some(alts) = obj.get(key).and_then(Value::as_array) {
                let mut parts: Vec<String> = Vec::new();
                for (i, alt) in alts.iter().enumerate() {
                    let variant = alt["required"][0]
                        .as_str()
                        .map_or(format!("{name}{i}"), |v| format!("{name}{v}"));
                    let t = self.ty(alt, &variant);
                    if !parts.contains(&t) {
                        parts.push(t);
                    }
                }
                return format!("Union[{}]", parts.join(", "));
            }
        }
        let types: Vec<&str> = match obj.get("type") {
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
            _ => return "Any".into(),
        };
        let mut parts: Vec<String> = types.iter().map(|t| self.plain(obj, t, name)).collect();
        parts.dedup();
        match parts.len() {
            1 => parts.remove(0),
            _ => format!("Union[{}]", parts.join(", ")),
        }
    }

    /// One JSON type of `obj` in Python.
    fn plain(&mut self, obj: &Map<String, Value>, t: &str, name: &str) -> String {
        match t {
            "null" => "None".into(),
            "boolean" => "bool".into(),
            "integer" => "int".into(),
            "number" => "float".into(),
            "string" => "str".into(),
            "array" => match (obj.get("prefixItems"), obj.get("items")) {
                (Some(Value::Array(items)), _) => {
                    let ts: Vec<String> = items.iter().map(|s| self.ty(s, name)).collect();
                    format!("tuple[{}]", ts.join(", "))
                }
                (_, Some(items)) => format!("list[{}]", self.ty(items, name)),
                _ => "list[Any]".into(),
            },
            _ => match (obj.get("properties"), obj.get("additionalProperties")) {
                (Some(Value::Object(props)), _) if !props.is_empty() => self.class(obj, props, name),
                (_, Some(v @ Value::Object(_))) => format!("dict[str, {}]", self.ty(v, name)),
                _ => "dict[str, Any]".into(),
            },
        }
    }

    /// A `TypedDict` class for an object schema; its name, quoted.
    fn class(&mut self, obj: &Map<String, Value>, props: &Map<String, Value>, name: &str) -> String {
        let required: Vec<&str> = obj
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut body = String::new();
        for (field, schema) in props {
            // A variant's payload is `<Variant>Fields`; a nested object `<Parent><Field>`.
            let child = match name.ends_with(&camel(field)) {
                true => format!("{name}Fields"),
                false => format!("{name}{}", camel(field)),
            };
            let t = self.ty(schema, &child);
            let t = if required.contains(&field.as_str()) {
                t
            } else {
                format!("NotRequired[{t}]")
            };
            let _ = writeln!(body, "    {field}: {t}");
        }
        let doc = obj
            .get("description")
            .and_then(Value::as_str)
            .map(|d| {
                format!(
                    "    \"\"\"{}\"\"\"\n\n",
                    d.replace('\n', " ").replace("\"\"\"", "'''")
                )
            })
            .unwrap_or_default();
        let _ = write!(self.out, "\n\nclass {name}(TypedDict):\n{doc}{body}");
        format!("\"{name}\"")
    }

    /// Every definition, in name order.
    fn all(mut self) -> String {
        let defs = std::mem::take(&mut self.defs);
        let mut aliases = String::new();
        for (name, schema) in &defs {
            let t = self.ty(schema, name);
            if t != format!("\"{name}\"") {
                let _ = write!(aliases, "\n{name} = {t}\n");
            }
        }
        format!("{HEADER}{}\n{aliases}", self.out)
    }
}

fn camel(field: &str) -> String {
    field
        .split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map_or(String::new(), |f| f.to_uppercase().chain(c).collect())
        })
        .collect()
}

#[test]
fn the_python_protocol_is_generated_from_the_rust_types() {
    let mut generator = SchemaSettings::draft2020_12().into_generator();
    generator.subschema_for::<Turn>();
    generator.subschema_for::<Observation>();
    generator.subschema_for::<RunInfo>();
    generator.subschema_for::<contrai_lifecycle::preflight::JobFacts>();
    generator.subschema_for::<contrai_lifecycle::preflight::Finding>();
    generator.subschema_for::<contrai_lifecycle::CheckpointRecord>();
    let defs: Map<String, Value> = generator
        .definitions()
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for root in [
        "Turn",
        "Observation",
        "RunInfo",
        "Action",
        "Request",
        "JobFacts",
        "PreflightFinding",
        "CheckpointRecord",
    ] {
        assert!(
            defs.contains_key(root),
            "{root} has no definition: {:?}",
            defs.keys()
        );
    }
    let text = Python {
        defs,
        out: String::new(),
    }
    .all();
    if std::env::var_os("CONTRAI_BLESS").is_some() {
        std::fs::write(FILE, &text).unwrap();
    }
    let have = std::fs::read_to_string(FILE).unwrap_or_default();
    assert!(
        have == text,
        "{FILE} is not what the Rust types say now: rewrite it with CONTRAI_BLESS=1 (and fix the Python that uses it)"
    );
}
