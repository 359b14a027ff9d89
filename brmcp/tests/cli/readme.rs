//! The README's set-up text, walked through: its commands are read out of README.md
//! and run (the built `brmcp`, never a new build), so an edit that breaks a step fails
//! here. As far as a machine without a real Bison Relay allows:
//!
//! - *Set up*: the two commands of its `sh` block. `cargo run -p brmcp --
//!   demo` runs as the built binary; `scripts/test` (which runs this test) is checked,
//!   not run: it parses, every script it calls exists, and `.ci/run` runs it. A new
//!   command there fails the test until it is walked through here too.
//! - *Links*: every relative link of the README and of the pages under `docs/` names a
//!   file of the repository (and an anchor of a page, a heading of it).
//!
//! The guide's walkthroughs, from the devnet to a paid call, run in `guide.rs`.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::processes::brmcp;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_owned()
}

fn readme() -> String {
    std::fs::read_to_string(workspace().join("README.md")).expect("README.md")
}

/// The text of the section headed `heading`, up to the next section of its level.
fn section<'a>(text: &'a str, heading: &str) -> &'a str {
    let start = text
        .find(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("README has no {heading:?}"));
    let body = &text[start + heading.len() + 2..];
    body.find("\n## ").map_or(body, |end| &body[..end])
}

/// The lines of the first fenced block of `lang` in `text`.
fn fenced(text: &str, lang: &str) -> Vec<String> {
    let open = format!("```{lang}\n");
    let start = text
        .find(&open)
        .unwrap_or_else(|| panic!("no ```{lang} block"));
    let body = &text[start + open.len()..];
    let end = body.find("```").expect("unclosed block");
    body[..end]
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

/// `brmcp` run in `cwd` with the words of `line` after its `brmcp`.
fn command_line(line: &str, cwd: &Path) -> Command {
    let mut words = line.split_whitespace();
    assert_eq!(words.next(), Some("brmcp"), "{line}");
    let args: Vec<&str> = words.collect();
    let mut cmd = brmcp(&args);
    cmd.current_dir(cwd);
    cmd
}

fn run_ok(mut cmd: Command) -> String {
    let out = cmd.output().expect("run brmcp");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn readme_setup_commands_run() {
    let text = readme();
    let commands = fenced(section(&text, "## Set up"), "sh");
    assert_eq!(commands.len(), 2, "the two set-up commands: {commands:?}");
    for command in &commands {
        if let Some(rest) = command.strip_prefix("cargo run -p brmcp -- ") {
            // The built binary stands in for the build.
            let tmp = tempfile::tempdir().expect("temp dir");
            let mut cmd = command_line(&format!("brmcp {rest}"), tmp.path());
            cmd.env("TMPDIR", tmp.path());
            let out = run_ok(cmd);
            for expected in ["echo", "fortune", "demo complete"] {
                assert!(
                    out.contains(expected),
                    "{command}: no {expected:?} in:\n{out}"
                );
            }
        } else if command == "scripts/test" {
            check_test_script(command);
        } else {
            panic!("the README's set-up command {command:?} is not walked through here");
        }
    }
}

/// `scripts/test` runs this test, so it is checked instead: it is executable, it
/// parses, every script it runs exists, and CI runs it.
fn check_test_script(command: &str) {
    let root = workspace();
    let script = root.join(command);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&script)
            .expect(command)
            .permissions()
            .mode();
        assert!(mode & 0o111 != 0, "{command} is not executable");
    }
    let parsed = Command::new("bash")
        .arg("-n")
        .arg(&script)
        .status()
        .expect("bash");
    assert!(parsed.success(), "{command} does not parse");
    let body = std::fs::read_to_string(&script).expect(command);
    let called: Vec<&str> = body
        .split_whitespace()
        .filter(|w| w.starts_with("scripts/"))
        .collect();
    assert!(!called.is_empty(), "{command} runs no helper scripts");
    for helper in called {
        assert!(
            root.join(helper).is_file(),
            "{command} runs {helper}, which is missing"
        );
    }
    assert!(
        body.contains("cargo test --workspace"),
        "{command} runs the tests"
    );
    let ci = std::fs::read_to_string(root.join(".ci/run")).expect(".ci/run");
    assert!(
        ci.lines()
            .map(str::trim)
            .any(|l| l == command || l == format!("bash {command}")),
        ".ci/run does not run {command}"
    );
}

/// The markdown files whose links are checked: the README and every page under docs/.
fn markdown_files() -> Vec<PathBuf> {
    let root = workspace();
    let mut files = vec![root.join("README.md")];
    let mut dirs = vec![root.join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("docs dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    files
}

/// A heading's anchor as GitHub makes it: lowercase, spaces to `-`, other punctuation
/// dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The targets of the `](target)` links of `text`, outside code blocks.
fn links(text: &str) -> Vec<String> {
    let mut in_code = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            out.push(after[..end].to_owned());
            rest = &after[end..];
        }
    }
    out
}

#[test]
fn readme_and_docs_links_resolve() {
    let root = workspace();
    let mut broken = Vec::new();
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).expect("markdown");
        // Links wrap across lines in the pages: join them first.
        let joined = text.replace("\n", " ");
        let mut targets = links(&text);
        targets.extend(links(&joined));
        for target in targets {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, fragment) = target.split_once('#').unwrap_or((&target, ""));
            let dest = if path.is_empty() {
                file.clone()
            } else {
                file.parent().expect("parent").join(path)
            };
            if !dest.exists() {
                broken.push(format!(
                    "{}: {target}",
                    file.strip_prefix(&root).unwrap_or(&file).display()
                ));
                continue;
            }
            if !fragment.is_empty() && dest.extension().is_some_and(|e| e == "md") {
                let page = std::fs::read_to_string(&dest).expect("page");
                let found = page
                    .lines()
                    .filter_map(|l| l.strip_prefix('#'))
                    .map(|h| anchor(h.trim_start_matches('#')))
                    .any(|a| a == fragment);
                if !found {
                    broken.push(format!(
                        "{}: {target} (no such heading)",
                        file.strip_prefix(&root).unwrap_or(&file).display()
                    ));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}
