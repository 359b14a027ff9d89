//! Sets `BRMCP_GIT_COMMIT`, the commit `brmcp --version` prints: `git rev-parse` in a
//! checkout, the `.cargo_vcs_info.json` cargo writes into a packaged crate, else
//! `unknown` (a source tarball without git builds too).

use std::path::Path;
use std::process::Command;

/// How many hex digits of the commit to print: short, still unique in practice.
const SHORT: usize = 12;

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    let commit = from_git(&dir)
        .or_else(|| from_vcs_info(Path::new(&dir)))
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=BRMCP_GIT_COMMIT={commit}");
    println!("cargo:rerun-if-changed=build.rs");
    // Only a packaged crate has it; a path that does not exist would rerun this script,
    // and so rebuild the crate, at every build.
    let vcs_info = Path::new(&dir).join(".cargo_vcs_info.json");
    if vcs_info.exists() {
        println!("cargo:rerun-if-changed={}", vcs_info.display());
    }
}

/// The checkout's commit; watches HEAD and the branch it names so a new commit
/// rebuilds. (Not the index or the work tree: `git status` rewrites the index, which
/// would rebuild the crate at every build.)
fn from_git(dir: &str) -> Option<String> {
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(args)
            .current_dir(dir)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let commit = git(&["rev-parse", "HEAD"])?;
    if let Some(path) = git(&["rev-parse", "--git-path", "HEAD"]) {
        let path = Path::new(dir).join(path);
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"])
        && let Some(path) = git(&["rev-parse", "--git-path", &branch])
    {
        let path = Path::new(dir).join(path);
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    Some(commit[..commit.len().min(SHORT)].to_owned())
}

/// The commit cargo recorded when it packaged the crate.
fn from_vcs_info(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join(".cargo_vcs_info.json")).ok()?;
    let key = "\"sha1\"";
    let rest = &text[text.find(key)? + key.len()..];
    let start = rest.find('"')? + 1;
    let sha: String = rest[start..]
        .chars()
        .take_while(char::is_ascii_hexdigit)
        .collect();
    (!sha.is_empty()).then(|| sha[..sha.len().min(SHORT)].to_owned())
}
