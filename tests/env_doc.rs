//! docs/ENVIRONMENT.md lists every `MXMOE_*` variable the source and the build read, and no
//! variable they no longer read; `mxmoe info` shows the ones that are set.

use std::collections::BTreeSet;
use std::path::Path;

/// The `MXMOE_*` names in `text` (a name ending in `_` is a prefix: `MXMOE_LLVM_{tool}`).
fn names(text: &str) -> BTreeSet<String> {
    let b = text.as_bytes();
    let mut out = BTreeSet::new();
    let mut i = 0;
    while let Some(p) = text[i..].find("MXMOE_") {
        let s = i + p;
        let mut e = s + "MXMOE_".len();
        while e < b.len() && (b[e].is_ascii_uppercase() || b[e].is_ascii_digit() || b[e] == b'_') {
            e += 1;
        }
        // Part of a longer identifier (e.g. `FOO_MXMOE_X`) is not a variable name.
        let starts_word = s == 0 || !(b[s - 1].is_ascii_alphanumeric() || b[s - 1] == b'_');
        if starts_word && e > s + "MXMOE_".len() {
            out.insert(text[s..e].to_string());
        }
        i = e;
    }
    out
}

fn source_names() -> BTreeSet<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("build.rs")];
    let mut dirs = vec![root.join("src")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    let mut all = BTreeSet::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        // Only names the code reads: a string literal passed to env::var, or a format!ed
        // prefix; doc comments name the same variables, so every name counts.
        all.extend(names(&text));
    }
    all
}

fn doc_text() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/ENVIRONMENT.md"))
        .unwrap()
}

#[test]
fn every_variable_the_source_reads_is_documented() {
    let doc = names(&doc_text());
    let missing: Vec<String> = source_names()
        .into_iter()
        .filter(|n| {
            if n.ends_with('_') {
                // A prefix (`MXMOE_LLVM_`, `MXMOE_HIP_CLANG_`): some documented name extends it.
                !doc.iter().any(|d| d.starts_with(n.as_str()) && d != n)
            } else {
                !doc.contains(n)
            }
        })
        .collect();
    assert!(
        missing.is_empty(),
        "read by the source but not in docs/ENVIRONMENT.md: {missing:?}"
    );
}

#[test]
fn every_documented_variable_is_read_by_the_source() {
    let src = source_names();
    let stale: Vec<String> = names(&doc_text())
        .into_iter()
        .filter(|d| {
            !src.contains(d)
                && !src
                    .iter()
                    .any(|p| p.ends_with('_') && d.starts_with(p.as_str()))
        })
        .collect();
    assert!(
        stale.is_empty(),
        "in docs/ENVIRONMENT.md but read nowhere in src/ or build.rs: {stale:?}"
    );
}

#[test]
fn info_shows_the_variables_that_are_set() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mxmoe"))
        .arg("info")
        .env("MXMOE_GEMV_PAIRS", "7")
        .env("MXMOE_HIP_DEVICE", "0")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("MXMOE_GEMV_PAIRS=7"), "{text}");
    assert!(text.contains("MXMOE_HIP_DEVICE=0"), "{text}");
}

#[test]
fn the_name_scanner_finds_names_and_prefixes() {
    let n = names("a MXMOE_FOO=1, `MXMOE_LLVM_{tool}` and XMXMOE_BAR, MXMOE_ alone");
    let want: BTreeSet<String> = ["MXMOE_FOO", "MXMOE_LLVM_"].map(String::from).into();
    assert_eq!(n, want);
}
