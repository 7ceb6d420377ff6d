//! The safe crate reaches every function of koila.h: each `pub fn koila_*` that bindgen
//! generated from the header (koila-sys/src/bindings.rs, itself checked against the header
//! by ctest's rust.sys_bindings_current) is called somewhere in this crate's sources.
use std::fs;
use std::path::Path;

fn functions(bindings: &str) -> Vec<String> {
    bindings
        .split("pub fn ")
        .skip(1)
        .filter_map(|rest| rest.split('(').next())
        .filter(|name| name.starts_with("koila_"))
        .map(str::to_string)
        .collect()
}

/// A direct call, or an entry of the operator tables in ops.rs (`name => koila_x;`).
fn called(sources: &str, f: &str) -> bool {
    sources.contains(&format!("sys::{f}(")) || sources.contains(&format!("=> {f};"))
}

#[test]
fn every_c_function_is_wrapped() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bindings = fs::read_to_string(root.join("../koila-sys/src/bindings.rs")).unwrap();
    let declared = functions(&bindings);
    assert!(declared.len() > 100, "only {} functions found in bindings.rs", declared.len());
    let mut sources = String::new();
    for entry in fs::read_dir(root.join("src")).unwrap() {
        sources += &fs::read_to_string(entry.unwrap().path()).unwrap();
    }
    let missing: Vec<&String> = declared.iter().filter(|f| !called(&sources, f)).collect();
    assert!(missing.is_empty(), "koila.h functions the safe crate does not wrap: {missing:?}");
}
