//! The guide's shell blocks, run: every ```sh block of `docs/guide/*.md` marked with an
//! HTML comment (invisible on the rendered page) runs against the devnet, with the
//! built `brmcp` first on `PATH`, and the output shown after it is compared with what
//! it printed. So a page whose command or output no longer holds fails here.
//!
//! The markers, each on the line before a fenced block:
//!
//! - `<!-- ci -->`: run the block; it must succeed (`set -eu`).
//! - `<!-- ci: background "TEXT" -->`: start the block's one command in the background
//!   and wait until its output shows TEXT (a terminal of its own, for the reader).
//! - `<!-- ci: stop -->`, alone (no block): stop the background block started last
//!   and still running, as Ctrl-C in its terminal would (SIGTERM, which brmcp takes as
//!   Ctrl-C), and wait until it has exited.
//! - `<!-- ci: output -->`: a ```text block the previous step's output must contain,
//!   line by line in order, after normalizing: every word holding a digit (uids,
//!   tokens, times, ports, amounts) matches any such word, runs of spaces are one, and
//!   `...` matches anything (a random fortune).
//!
//! All the pages' blocks run in one shell, page after page in [`PAGES`] order, from an
//! empty directory: `devnet.md` starts the network, the bot and the bridge, and the
//! pages after it use them (and the shell's variables). The bridges' `--listen` ports
//! of the pages, 8891, 8892 and 8893 (the directory and announcement pages' devnets of
//! their own), are replaced
//! by free ones so that tests in parallel do not meet.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The guide's pages with marked blocks, in the order they run.
const PAGES: [&str; 9] = [
    "devnet.md",
    "sell-tools.md",
    "agents.md",
    "spending.md",
    "operate.md",
    "money.md",
    "wire.md",
    "directory.md",
    "announce.md",
];

/// The pages whose marked blocks another test runs: the codec page's C and Go
/// programs link the FFI crate's library (`brmcp-wire-ffi/tests/guide.rs`).
const RUN_ELSEWHERE: [&str; 1] = ["codec.md"];

/// The port the pages write for the bridge.
const PAGE_PORT: &str = "127.0.0.1:8891";

/// The port of the directory page's bridge, on a devnet of its own.
const PAGE_PORT_2: &str = "127.0.0.1:8892";

/// The port of the announcement page's bridge, on a devnet of its own.
const PAGE_PORT_3: &str = "127.0.0.1:8893";

/// How long a background block may take to print its ready line (a slow, shared
/// machine starting the devnet's TLS endpoints).
const READY_WITHIN_SECS: u32 = 120;

/// How long all the blocks may take together.
const ALL_WITHIN: Duration = Duration::from_secs(600);

/// What a marker asks of its block.
#[derive(Debug, PartialEq)]
enum Kind {
    Run,
    Background(String),
    Stop,
}

/// One marked block of a page.
#[derive(Debug)]
struct Step {
    /// `page:line` of the block, for failures.
    at: String,
    kind: Kind,
    body: String,
    expected: Option<String>,
}

fn guide_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .join("docs/guide")
}

/// The body of the fenced block starting at `lines[from]` (its opening fence) and the
/// index of the line after its closing fence.
fn fenced(page: &str, lines: &[&str], from: usize, lang: &str) -> (String, usize) {
    let open = lines.get(from).map(|l| l.trim());
    assert_eq!(
        open,
        Some(format!("```{lang}").as_str()),
        "{page}:{}: a ci marker is not followed by a ```{lang} block",
        from + 1
    );
    let mut body = String::new();
    for (i, line) in lines.iter().enumerate().skip(from + 1) {
        if line.trim() == "```" {
            return (body, i + 1);
        }
        body.push_str(line);
        body.push('\n');
    }
    panic!("{page}:{}: unclosed block", from + 1);
}

/// The marked blocks of one page.
fn steps(page: &str, text: &str) -> Vec<Step> {
    let lines: Vec<&str> = text.lines().collect();
    let mut steps: Vec<Step> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim();
        let Some(marker) = line
            .strip_prefix("<!-- ci")
            .and_then(|m| m.strip_suffix("-->"))
        else {
            i += 1;
            continue;
        };
        let marker = marker.trim();
        let at = format!("{page}:{}", i + 2);
        if marker == ": stop" {
            steps.push(Step {
                at,
                kind: Kind::Stop,
                body: String::new(),
                expected: None,
            });
            i += 1;
            continue;
        }
        if marker == ": output" {
            let (body, next) = fenced(page, &lines, i + 1, "text");
            let last = steps
                .last_mut()
                .unwrap_or_else(|| panic!("{at}: output with no step before it"));
            assert!(last.kind != Kind::Stop, "{at}: output after a stop");
            assert!(last.expected.is_none(), "{at}: a second output block");
            last.expected = Some(body);
            i = next;
            continue;
        }
        let kind = if marker.is_empty() {
            Kind::Run
        } else if let Some(text) = marker.strip_prefix(": background") {
            let text = text.trim();
            let ready = text
                .strip_prefix('"')
                .and_then(|t| t.strip_suffix('"'))
                .unwrap_or_else(|| panic!("{at}: background wants \"TEXT\""));
            Kind::Background(ready.to_owned())
        } else {
            panic!("{at}: unknown marker {line:?}");
        };
        let (body, next) = fenced(page, &lines, i + 1, "sh");
        if kind != Kind::Run {
            assert_eq!(
                body.trim().lines().count(),
                1,
                "{at}: a background block is one command"
            );
        }
        steps.push(Step {
            at,
            kind,
            body: body
                .replace(PAGE_PORT, "127.0.0.1:@PORT@")
                .replace(PAGE_PORT_2, "127.0.0.1:@PORT2@")
                .replace(PAGE_PORT_3, "127.0.0.1:@PORT3@"),
            expected: None,
        });
        i = next;
    }
    steps
}

/// Single quotes for bash.
fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The one script that runs every step: each step's output in `out/N`, the step under
/// way in `out/current`, background processes ended on exit.
fn script(steps: &[Step], ports: [u16; 3]) -> String {
    let mut s = String::from(
        "set -eu\nbg_pids=()\n\
         trap 'kill ${bg_pids[@]+\"${bg_pids[@]}\"} 2>/dev/null || true; wait' EXIT\n",
    );
    for (n, step) in steps.iter().enumerate() {
        let body = step
            .body
            .replace("@PORT@", &ports[0].to_string())
            .replace("@PORT2@", &ports[1].to_string())
            .replace("@PORT3@", &ports[2].to_string());
        s.push_str(&format!("echo {n} > out/current\n"));
        match &step.kind {
            Kind::Run => s.push_str(&format!("{{\n{body}}} > out/{n} 2>&1\n")),
            Kind::Background(ready) => {
                let ready = quoted(ready);
                s.push_str(&format!(
                    "{} > out/{n} 2>&1 &\nbg_pids+=($!)\n\
                     for _ in $(seq {tenths}); do\n\
                     \x20 grep -qF -- {ready} out/{n} && break\n\
                     \x20 kill -0 $! 2>/dev/null || break\n\
                     \x20 sleep 0.1\n\
                     done\n\
                     grep -qF -- {ready} out/{n}\n",
                    body.trim(),
                    tenths = READY_WITHIN_SECS * 10,
                ));
            }
            Kind::Stop => s.push_str(
                "stopped=${bg_pids[-1]}\nunset 'bg_pids[-1]'\n\
                 kill -TERM \"$stopped\"\nwait \"$stopped\" || true\n",
            ),
        }
    }
    s.push_str("echo done > out/current\n");
    s
}

/// A line as compared: words holding a digit are `#`, space runs are one.
fn normalized(line: &str) -> String {
    let mut out = String::new();
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        if word.chars().any(|c| c.is_ascii_digit()) {
            out.push('#');
        } else {
            out.push_str(word);
        }
        word.clear();
    };
    for c in line.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether `actual` is `expected` with each `...` of it standing for any text.
fn matches(expected: &str, actual: &str) -> bool {
    let mut pieces = expected.split("...");
    let first = pieces.next().unwrap_or("");
    let Some(mut rest) = actual.strip_prefix(first) else {
        return false;
    };
    let pieces: Vec<&str> = pieces.collect();
    let Some((last, middle)) = pieces.split_last() else {
        return rest.is_empty();
    };
    for piece in middle {
        match rest.find(piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// The expected lines missing from `actual`, in order.
fn missing(expected: &str, actual: &str) -> Vec<String> {
    let actual: Vec<String> = actual.lines().map(normalized).collect();
    let mut from = 0;
    let mut missing = Vec::new();
    for line in expected.lines().filter(|l| !l.trim().is_empty()) {
        let want = normalized(line);
        match actual[from..].iter().position(|a| matches(&want, a)) {
            Some(at) => from += at + 1,
            None => missing.push(line.to_owned()),
        }
    }
    missing
}

/// Kills the script's process group however the test ends.
struct Group(std::process::Child);

impl Drop for Group {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = Command::new("kill")
                .args(["-TERM", "--", &format!("-{}", self.0.id())])
                .status();
            let deadline = Instant::now() + Duration::from_secs(15);
            while self.0.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", self.0.id())])
                .status();
            let _ = self.0.wait();
        }
    }
}

#[test]
fn markers_are_read_as_documented() {
    let page = "t\n<!-- ci: background \"ready\" -->\n```sh\nbrmcp devnet --dir ./d\n```\n\
                <!-- ci: output -->\n```text\nhello 42\n```\n<!-- ci -->\n```sh\na\nb\n```\n<!-- ci: stop -->\n";
    let steps = steps("t.md", page);
    assert_eq!(steps.len(), 3);
    assert_eq!(steps[2].kind, Kind::Stop);
    assert_eq!(steps[0].kind, Kind::Background("ready".into()));
    assert_eq!(steps[0].expected.as_deref(), Some("hello 42\n"));
    assert_eq!(steps[1].body, "a\nb\n");
    assert!(
        missing(
            "uid 28d0e6  at 2026-12-06T01:39:38Z",
            "uid ffee99 at 1999-01-01T00:00:00Z"
        )
        .is_empty()
    );
    assert_eq!(
        missing("uid alice", "uid bob"),
        vec!["uid alice".to_owned()]
    );
    assert!(missing("{\"fortune\":\"...\"}", "{\"fortune\":\"Be patient.\"}").is_empty());
    assert!(!missing("{\"fortune\":\"...\"}", "{\"echo\":\"hi\"}").is_empty());
    assert!(!missing("a\nb", "b\na").is_empty(), "order matters");
}

#[test]
fn every_guide_page_has_its_blocks_run() {
    let mut pages: Vec<String> = std::fs::read_dir(guide_dir())
        .expect("docs/guide")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md"))
        .collect();
    pages.sort();
    assert!(!pages.is_empty(), "no guide pages");
    for page in pages {
        let text = std::fs::read_to_string(guide_dir().join(&page)).expect("page");
        let listed = PAGES.contains(&page.as_str()) || RUN_ELSEWHERE.contains(&page.as_str());
        assert!(
            listed,
            "docs/guide/{page} is run by no test: mark its commands and add it to PAGES"
        );
        assert!(
            text.contains("<!-- ci"),
            "docs/guide/{page} has no marked block"
        );
    }
}

#[test]
fn guide_shell_blocks_run_on_the_devnet() {
    let mut all = Vec::new();
    for page in PAGES {
        let text = std::fs::read_to_string(guide_dir().join(page)).expect(page);
        let steps = steps(page, &text);
        assert!(!steps.is_empty(), "{page} has no ci blocks");
        all.extend(steps);
    }
    let work = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(work.path().join("out")).expect("out dir");
    let mut ports = [0u16; 3];
    for n in 0..ports.len() {
        ports[n] = loop {
            let p = super::processes::free_port();
            if !ports[..n].contains(&p) {
                break p;
            }
        };
    }
    let script_path = work.path().join("guide.sh");
    std::fs::write(&script_path, script(&all, ports)).expect("write the script");

    let bin = Path::new(env!("CARGO_BIN_EXE_brmcp"))
        .parent()
        .expect("bin dir")
        .to_owned();
    let path = std::env::join_paths(std::iter::once(bin).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .expect("PATH");
    let mut cmd = Command::new("bash");
    cmd.arg(&script_path)
        .current_dir(work.path())
        .env("PATH", path)
        .env("TMPDIR", work.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut group = Group(cmd.spawn().expect("bash"));
    let deadline = Instant::now() + ALL_WITHIN;
    let status = loop {
        if let Some(status) = group.0.try_wait().expect("wait") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the guide's blocks did not finish within {ALL_WITHIN:?}; under way: step {}",
            std::fs::read_to_string(work.path().join("out/current")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let output = |n: usize| {
        std::fs::read_to_string(work.path().join(format!("out/{n}"))).unwrap_or_default()
    };
    let current = std::fs::read_to_string(work.path().join("out/current")).unwrap_or_default();
    if !status.success() {
        let n: usize = current
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("the script failed ({status}) after its steps"));
        let step = &all[n];
        panic!(
            "the block at {} failed ({status}):\n{}\n-- its output:\n{}",
            step.at,
            step.body,
            output(n)
        );
    }
    assert_eq!(current.trim(), "done");
    let mut failures = Vec::new();
    for (n, step) in all.iter().enumerate() {
        if let Some(expected) = &step.expected {
            let missing = missing(expected, &output(n));
            if !missing.is_empty() {
                failures.push(format!(
                    "the output after {} lacks:\n{}\n-- it printed:\n{}",
                    step.at,
                    missing.join("\n"),
                    output(n)
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
