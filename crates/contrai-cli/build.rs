//! Stamps the commit the binary was built from into `contrai --version`.
//!
//! `CONTRAI_COMMIT` wins (an sdist or a release archive has no `.git`); otherwise git names the
//! commit, with `-dirty` when tracked files differ from it; without either, `unknown`.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=CONTRAI_COMMIT");
    let commit = std::env::var("CONTRAI_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(git_commit)
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=CONTRAI_COMMIT={}", commit.trim());
}

/// The checked-out commit (12 hex digits), `-dirty` when tracked files were changed.
fn git_commit() -> Option<String> {
    let git_dir = PathBuf::from(git(&["rev-parse", "--absolute-git-dir"])?);
    // A new commit or checkout moves HEAD or a ref: build again to stamp it. (Not the index:
    // every `git add` would relink the binary; `-dirty` is read when HEAD moves.)
    for watched in ["HEAD", "refs", "packed-refs"] {
        println!("cargo:rerun-if-changed={}", git_dir.join(watched).display());
    }
    let head = git(&["rev-parse", "--short=12", "HEAD"])?;
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|changes| !changes.is_empty());
    Some(if dirty { format!("{head}-dirty") } else { head })
}

/// One git command's trimmed output, or `None` when git is missing or fails.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}
