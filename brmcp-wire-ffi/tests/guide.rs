//! The guide's codec page (`docs/guide/codec.md`), checked: each program it shows is a
//! file of the repository, and its commands build and run those files against this
//! crate's static library, printing what the page shows.
//!
//! The markers, each on the line before a fenced block (invisible on the page):
//!
//! - `<!-- ci: file PATH -->`: the block is exactly the file PATH of the repository.
//! - `<!-- ci -->`: a ```sh block, run with `bash -eu` in a directory laid out as the
//!   repository root (`brmcp-wire-ffi` and `target/release`, the directory holding the
//!   static library this test was built with; `CGO_LDFLAGS` names it for Go, as the
//!   page says to do with another target directory).
//! - `<!-- ci: output -->`: a ```text block the previous run block must print exactly.
//!
//! It needs a C compiler and Go 1.19 or newer (`scripts/test-ffi` installs Go).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The page, from the repository root.
const PAGE: &str = "docs/guide/codec.md";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_owned()
}

/// What a marker asks of its block.
#[derive(Debug, PartialEq)]
enum Kind {
    File(String),
    Run,
    Output,
}

/// The marked blocks of the page, in order: what each asks, its `page:line` and body.
fn blocks(text: &str) -> Vec<(Kind, String, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(marker) = lines[i]
            .trim()
            .strip_prefix("<!-- ci")
            .and_then(|m| m.strip_suffix("-->"))
        else {
            i += 1;
            continue;
        };
        let at = format!("{PAGE}:{}", i + 2);
        let kind = match marker.trim() {
            "" => Kind::Run,
            ": output" => Kind::Output,
            m => match m.strip_prefix(": file ") {
                Some(path) => Kind::File(path.trim().to_owned()),
                None => panic!("{at}: unknown marker {:?}", lines[i]),
            },
        };
        let open = lines.get(i + 1).map_or("", |l| l.trim());
        assert!(open.starts_with("```"), "{at}: a marker without a block");
        let mut body = String::new();
        let mut j = i + 2;
        loop {
            let line = lines
                .get(j)
                .unwrap_or_else(|| panic!("{at}: unclosed block"));
            if line.trim() == "```" {
                break;
            }
            body.push_str(line);
            body.push('\n');
            j += 1;
        }
        out.push((kind, at, body));
        i = j + 1;
    }
    out
}

/// The directory holding the static library this test binary was linked beside.
fn library_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary");
    let deps = exe.parent().expect("deps dir");
    assert!(
        deps.join("libbrmcp_wire_ffi.a").is_file(),
        "no libbrmcp_wire_ffi.a in {}",
        deps.display()
    );
    deps.to_owned()
}

/// A fresh directory that is removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn the_codec_page_shows_the_files_ci_builds_and_their_output() {
    let text = std::fs::read_to_string(root().join(PAGE)).expect(PAGE);
    let blocks = blocks(&text);
    let files = blocks
        .iter()
        .filter(|b| matches!(b.0, Kind::File(_)))
        .count();
    assert!(
        files >= 2,
        "{PAGE}: the C and the Go program are ci: file blocks"
    );

    let scratch =
        Scratch(std::env::temp_dir().join(format!("brmcp-wire-ffi-guide-{}", std::process::id())));
    std::fs::create_dir_all(scratch.0.join("target")).expect("scratch dir");
    let lib = library_dir();
    std::os::unix::fs::symlink(
        root().join("brmcp-wire-ffi"),
        scratch.0.join("brmcp-wire-ffi"),
    )
    .expect("link the crate");
    std::os::unix::fs::symlink(&lib, scratch.0.join("target/release")).expect("link the lib");

    let mut ran = 0;
    let mut last: Option<(String, String)> = None;
    for (kind, at, body) in &blocks {
        match kind {
            Kind::File(path) => {
                let file = std::fs::read_to_string(root().join(path))
                    .unwrap_or_else(|e| panic!("{at}: {path}: {e}"));
                assert!(
                    *body == file,
                    "{at}: the block is not {path} as it is; put the file's text in the page"
                );
            }
            Kind::Run => {
                let out = Command::new("bash")
                    .args(["-euc", body])
                    .current_dir(&scratch.0)
                    .env("CGO_LDFLAGS", format!("-L{}", lib.display()))
                    .output()
                    .unwrap_or_else(|e| panic!("{at}: bash: {e}"));
                let printed = format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
                assert!(
                    out.status.success(),
                    "{at}: the block failed ({}):\n{body}\n-- its output:\n{printed}",
                    out.status
                );
                ran += 1;
                last = Some((at.clone(), printed));
            }
            Kind::Output => {
                let (run_at, printed) = last
                    .take()
                    .unwrap_or_else(|| panic!("{at}: output with no run block before it"));
                assert_eq!(
                    printed.trim_end(),
                    body.trim_end(),
                    "{at}: the output shown is not what the block at {run_at} printed"
                );
            }
        }
    }
    assert!(
        ran >= 2,
        "{PAGE}: the C and the Go program are built and run"
    );
}
