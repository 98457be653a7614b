//! The README's command-line walkthrough runs as written: every line of the ```sh blocks of its
//! "Command line" section, in order, in an empty folder, with the built `mxmoe` first on PATH.
//! (The install line, `cargo install --path .`, is the one command not run here: it would build
//! a second copy; the session that wrote this test ran it by hand.)

use std::path::Path;
use std::process::Command;

/// The ```sh code blocks' lines of the README section `title` (up to the next `## `).
fn sh_lines(readme: &str, title: &str) -> Vec<String> {
    let start = readme
        .find(&format!("\n## {title}\n"))
        .unwrap_or_else(|| panic!("README has no section '{title}'"));
    let rest = &readme[start + 4 + title.len()..];
    let section = &rest[..rest.find("\n## ").unwrap_or(rest.len())];
    let mut out = Vec::new();
    let mut in_sh = false;
    let mut cont = String::new();
    for line in section.lines() {
        if line.trim_start().starts_with("```") {
            in_sh = line.trim() == "```sh";
            continue;
        }
        if !in_sh || line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        // `\` continuations join into one command.
        match line.strip_suffix('\\') {
            Some(l) => cont.push_str(l),
            None => {
                cont.push_str(line);
                out.push(std::mem::take(&mut cont));
            }
        }
    }
    out
}

#[test]
fn readme_command_line_runs_as_written() {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .unwrap();
    let install = sh_lines(&readme, "Install");
    assert_eq!(install, ["cargo install --path ."]);
    let cmds = sh_lines(&readme, "Command line");
    assert!(cmds.len() >= 10, "{cmds:?}");
    let bin = Path::new(env!("CARGO_BIN_EXE_mxmoe"));
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let d = tempfile::tempdir().unwrap();
    for c in &cmds {
        assert!(c.starts_with("mxmoe "), "not an mxmoe command: {c}");
        let o = Command::new("bash")
            .args(["-c", c])
            .current_dir(d.path())
            .env("PATH", &path)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "README command failed ({:?}): {c}\nstdout: {}\nstderr: {}",
            o.status.code(),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    for f in ["result.safetensors", "verify.json", "check.xml", "bench.json"] {
        assert!(d.path().join(f).exists(), "{f} was not written");
    }
}
