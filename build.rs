//! Records the git commit the binary is built from (`TPUSIM_GIT`, "unknown" outside a
//! git checkout), so that the ranks of an MPI job can tell they run the same build.

use std::process::Command;

/// `git args`' output, trimmed, when git runs and succeeds.
fn git(args: &[&str]) -> Option<String> {
    let o = Command::new("git").args(args).output().ok()?;
    let s = String::from_utf8_lossy(&o.stdout).trim().to_string();
    (o.status.success() && !s.is_empty()).then_some(s)
}

fn main() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"]);
    println!(
        "cargo:rustc-env=TPUSIM_GIT={}",
        commit.as_deref().unwrap_or("unknown")
    );
    println!("cargo:rerun-if-changed=build.rs");
    // A new commit moves HEAD or the branch it names.
    if commit.is_some() {
        for path in [
            git(&["rev-parse", "--git-path", "HEAD"]),
            git(&["symbolic-ref", "-q", "HEAD"])
                .and_then(|r| git(&["rev-parse", "--git-path", &r])),
        ]
        .into_iter()
        .flatten()
        {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}
