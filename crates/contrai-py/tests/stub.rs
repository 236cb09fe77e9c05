//! `python/contrai/_core.pyi` is generated from the built extension: every binding gives its
//! Python signature with types, PyO3 keeps them in the library (`experimental-inspect`), and
//! `pyo3-introspection` reads them back. This test writes what the extension says now and fails
//! when the checked-in stub differs (`CONTRAI_BLESS=1` rewrites it), as `protocol.py`'s test does.

use std::fmt::Write;
use std::path::PathBuf;

use pyo3_introspection::model::{Argument, Arguments, Class, Function, Module};

const FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/python/contrai/_core.pyi");

/// What the introspection cannot see — the module's docstring, the imports of the protocol's
/// types, the version added at import — written as it is.
const HEADER: &str = r#""""Type stubs of the Rust core (``crates/contrai-py/src``). The conductor's turns, state and
observations are Python objects in their serde forms, typed by :mod:`contrai.protocol` (generated
from the Rust types); rows and recipes go in and out as JSON text.

Generated from the extension's signatures by ``crates/contrai-py/tests/stub.rs``; do not edit:
change the binding's ``#[pyo3(signature = ...)]``, then run that test with ``CONTRAI_BLESS=1``.
"""

import typing
from os import PathLike
from pathlib import Path
from typing import Any

from .protocol import CheckpointRecord, JobFacts, Observation, PreflightFinding, RunPlan, State, Turn

__version__: str
"#;

/// The exceptions the module exports (PyO3's introspection does not list them).
const EXCEPTIONS: &str = "class CorruptCheckpoint(RuntimeError): ...\n";

#[test]
fn the_stub_is_what_the_extension_declares() {
    let module = pyo3_introspection::introspect_cdylib(extension(), "_core")
        .expect("the extension's signatures are readable");
    let now = stub(&module);
    if std::env::var_os("CONTRAI_BLESS").is_some() {
        std::fs::write(FILE, &now).unwrap();
        return;
    }
    let checked_in = std::fs::read_to_string(FILE).unwrap_or_default();
    assert!(
        checked_in == now,
        "{FILE} differs from the extension's signatures; run \
         `CONTRAI_BLESS=1 cargo test -p contrai-py --test stub` and commit it"
    );
}

/// The extension cargo built beside this test (`deps/lib_core.so`, or its platform's name).
fn extension() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let name = format!(
        "{}_core{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    );
    deps.join(name)
}

/// The stub: the header, the constants, the exceptions, the classes, the functions, each in name
/// order.
fn stub(module: &Module) -> String {
    let mut out = String::from(HEADER);
    let mut attributes = module.attributes.clone();
    attributes.sort_by(|a, b| a.name.cmp(&b.name));
    for a in &attributes {
        let annotation = a.annotation.as_deref().unwrap_or("Any");
        writeln!(out, "{}: {annotation}", a.name).unwrap();
    }
    out.push('\n');
    out.push_str(EXCEPTIONS);
    let mut classes = module.classes.clone();
    classes.sort_by(|a, b| a.name.cmp(&b.name));
    for c in &classes {
        out.push('\n');
        class(&mut out, c);
    }
    out.push('\n');
    let mut functions = module.functions.clone();
    functions.sort_by(|a, b| a.name.cmp(&b.name));
    for f in &functions {
        writeln!(out, "{}", function(f, None)).unwrap();
    }
    out
}

/// A class with its methods, the constructor first (PyO3's `__new__` as the `__init__` a type
/// checker reads).
fn class(out: &mut String, c: &Class) {
    writeln!(out, "class {}:", c.name).unwrap();
    let mut methods = c.methods.clone();
    methods.sort_by_key(|m| (m.name != "__new__", m.name.clone()));
    for m in &methods {
        writeln!(out, "    {}", function(m, Some(&c.name)).replace('\n', "\n    ")).unwrap();
    }
    if methods.is_empty() {
        out.push_str("    ...\n");
    }
}

/// One `def`, with its decorators; `self` and `cls` plain (no `/`).
fn function(f: &Function, class: Option<&str>) -> String {
    let mut out = String::new();
    for d in &f.decorators {
        writeln!(out, "@{d}").unwrap();
    }
    let init = class.is_some() && f.name == "__new__";
    let name = if init { "__init__" } else { &f.name };
    let mut params: Vec<String> = Vec::new();
    if init {
        params.push("self".into());
    }
    params.extend(arguments(&f.arguments));
    let returns = if init {
        "None"
    } else {
        f.returns.as_deref().unwrap_or("Any")
    };
    write!(out, "def {name}({}) -> {returns}: ...", params.join(", ")).unwrap();
    out
}

/// The parameters in order (`cls` dropped: a constructor is written as `__init__`).
fn arguments(a: &Arguments) -> Vec<String> {
    let positional = a.positional_only_arguments.iter().filter(|p| p.name != "cls");
    let mut out: Vec<String> = positional.chain(&a.arguments).map(argument).collect();
    if let Some(v) = &a.vararg {
        out.push(format!("*{}", v.name));
    } else if !a.keyword_only_arguments.is_empty() {
        out.push("*".into());
    }
    out.extend(a.keyword_only_arguments.iter().map(argument));
    if let Some(k) = &a.kwarg {
        out.push(format!("**{}", k.name));
    }
    out
}

/// `name: type = default`, as the signature gives them.
fn argument(p: &Argument) -> String {
    let mut s = p.name.clone();
    if let Some(t) = &p.annotation {
        write!(s, ": {t}").unwrap();
    }
    if let Some(d) = &p.default_value {
        write!(s, " = {d}").unwrap();
    }
    s
}
