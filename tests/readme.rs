//! README.md runs as written: it stays a front door (at most about 250 lines), its test
//! command is the one CI runs, its demo command is `tpusim demo`, and every `$ tpusim …`
//! line of its `console` blocks runs here (in a scratch directory) with the exit status
//! it says (`# exit N`, else 0). Its `$ python -m tpusim …` lines are the Python
//! chapter's, which `python/tests/test_readme.py` runs.

use std::path::Path;
use std::process::Command;

fn readme() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap()
}

/// The bodies of the fenced blocks of `lang`.
fn blocks<'a>(text: &'a str, lang: &str) -> Vec<&'a str> {
    let fence = format!("```{lang}\n");
    text.split(fence.as_str())
        .skip(1)
        .map(|b| b.split("```").next().unwrap())
        .collect()
}

#[test]
fn the_readme_is_a_front_door() {
    let lines = readme().lines().count();
    assert!(lines <= 250, "README.md has {lines} lines");
}

#[test]
fn the_readme_test_command_is_what_ci_runs() {
    let text = readme();
    let sh = blocks(&text, "sh");
    assert_eq!(sh.len(), 2, "{sh:?}");
    assert_eq!(sh[0].trim(), "cargo run --release -- demo");
    let ci =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/run")).unwrap();
    let last = ci.lines().rev().find(|l| !l.trim().is_empty()).unwrap();
    assert_eq!(sh[1].trim(), last.trim());
}

/// A README command line: its arguments after `tpusim` and the exit status it says.
fn parse(line: &str) -> Option<(Vec<String>, i32)> {
    let rest = line.strip_prefix("$ tpusim ")?;
    let (cmd, comment) = rest.split_once('#').unwrap_or((rest, ""));
    let code = comment
        .trim()
        .strip_prefix("exit ")
        .and_then(|c| c.split(|ch: char| !ch.is_ascii_digit()).next())
        .map_or(0, |c| c.parse().unwrap());
    Some((cmd.split_whitespace().map(String::from).collect(), code))
}

#[test]
fn every_readme_command_runs_as_written() {
    let text = readme();
    let mut commands = vec![(vec!["demo".to_string()], 0)]; // `cargo run --release -- demo`
    for block in blocks(&text, "console") {
        for line in block.lines().filter(|l| l.starts_with("$ ")) {
            let parsed = parse(line);
            assert!(parsed.is_some(), "not a tpusim command: {line}");
            commands.extend(parsed);
        }
    }
    assert!(commands.len() > 5, "{commands:?}");
    let dir = tempfile::tempdir().unwrap();
    for (args, want) in commands {
        let out = Command::new(env!("CARGO_BIN_EXE_tpusim"))
            .args(&args)
            .current_dir(dir.path())
            .output()
            .expect("runs");
        assert_eq!(
            out.status.code(),
            Some(want),
            "tpusim {}\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn a_command_line_says_its_exit_status() {
    assert_eq!(
        parse("$ tpusim check x -p 4   # exit 1: the race"),
        Some((vec!["check".into(), "x".into(), "-p".into(), "4".into()], 1))
    );
    assert_eq!(
        parse("$ tpusim run psum"),
        Some((vec!["run".into(), "psum".into()], 0))
    );
    assert_eq!(parse("$ python -m tpusim run x.py"), None);
}
