//! The references generated from the code: `docs/reference/cli.md` and the man pages of
//! `docs/man/` come from the argument parser (`brmcp::cli::command`), and the test fails
//! when the committed ones differ from what the code makes now. `BRMCP_BLESS=1 cargo
//! test -p brmcp --test cli reference` writes them again.
//!
//! Also here: `brmcp completions SHELL`, and the hand-written references checked against
//! the code: every key of the configuration files (`docs/reference/config.md`) and every
//! error code (`docs/reference/errors.md`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::{Arg, ArgAction, Command};

use super::processes::brmcp;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_owned()
}

/// Whether this run writes the generated files instead of checking them.
fn blessing() -> bool {
    std::env::var_os("BRMCP_BLESS").is_some_and(|v| v == "1")
}

/// Checks (or, blessing, writes) one generated file; returns a failure to report.
fn check(path: &Path, generated: &[u8]) -> Option<String> {
    if blessing() {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, generated).expect("write a generated file");
        return None;
    }
    match std::fs::read(path) {
        Ok(committed) if committed == generated => None,
        Ok(_) => Some(format!("{} differs from the code", path.display())),
        Err(e) => Some(format!("{}: {e}", path.display())),
    }
}

/// The flag or positional as the usage line writes it.
fn arg_name(arg: &Arg) -> String {
    let value = arg
        .get_value_names()
        .map(|names| {
            names
                .iter()
                .map(|n| format!("<{n}>"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| format!("<{}>", arg.get_id().as_str().to_uppercase()));
    let takes_value = matches!(arg.get_action(), ArgAction::Set | ArgAction::Append);
    let mut names = Vec::new();
    if let Some(short) = arg.get_short() {
        names.push(format!("-{short}"));
    }
    if let Some(long) = arg.get_long() {
        names.push(format!("--{long}"));
    }
    if names.is_empty() {
        return value;
    }
    let names = names.join(", ");
    if takes_value {
        if arg.get_num_args().is_some_and(|n| n.min_values() == 0) {
            format!("{names} [{value}]")
        } else {
            format!("{names} {value}")
        }
    } else {
        names
    }
}

/// One table cell: no line breaks, no pipes, and `<...>` outside code spans escaped
/// (markdown would take `<datadir>` for an HTML tag and show nothing).
fn cell(text: &str) -> String {
    let text = text
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|");
    text.split('`')
        .enumerate()
        .map(|(i, part)| {
            if i % 2 == 0 {
                part.replace('<', "&lt;").replace('>', "&gt;")
            } else {
                part.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("`")
}

/// The command reference: every command, from the root down, with its usage and each
/// argument's help, default and values.
fn cli_markdown() -> String {
    let mut root = brmcp::cli::command();
    root.build();
    let mut out = String::from(
        "# Command reference\n\n\
         Generated from `brmcp`'s argument parser by `brmcp/tests/cli/reference.rs` \
         (`BRMCP_BLESS=1 cargo test -p brmcp --test cli reference` writes it again); \
         the same text is `brmcp COMMAND --help`, and `man brmcp-COMMAND` with the pages \
         of [`docs/man/`](../man/).\n\n\
         Every command takes `--log-level FILTER` (a level or `target=level` pairs; \
         overrides `RUST_LOG`, `BRMCP_LOG` and the `.conf`'s `debug` key), `-h, --help` \
         and `-V, --version`. Exit status: 0 on success, 1 for an error while running, 2 \
         for a usage error; `status` exits 3 when the process it asks is not running.\n",
    );
    fn walk(cmd: &Command, path: &str, out: &mut String) {
        if cmd.is_hide_set() {
            return;
        }
        let _ = write!(out, "\n## `{path}`\n\n");
        let about = cmd
            .get_long_about()
            .or(cmd.get_about())
            .map(|a| a.to_string())
            .unwrap_or_default();
        if !about.is_empty() {
            let _ = write!(out, "{}\n\n", about.trim());
        }
        let usage = cmd.clone().render_usage().to_string();
        let usage = usage.trim_start_matches("Usage: ").trim();
        let _ = write!(out, "```text\n{usage}\n```\n");
        let args: Vec<&Arg> = cmd
            .get_arguments()
            .filter(|a| !a.is_hide_set())
            .filter(|a| !matches!(a.get_id().as_str(), "help" | "version" | "log_level"))
            .collect();
        if !args.is_empty() {
            out.push_str("\n| argument | what it does |\n|---|---|\n");
            for arg in args {
                let mut help = arg
                    .get_long_help()
                    .or(arg.get_help())
                    .map(|h| h.to_string())
                    .unwrap_or_default();
                let help_end = help.trim_end();
                if !help_end.is_empty() && !help_end.ends_with(['.', ')', '!', '?']) {
                    help = format!("{help_end}.");
                }
                let possible: Vec<String> = arg
                    .get_possible_values()
                    .iter()
                    .filter(|v| !v.is_hide_set())
                    .map(|v| format!("`{}`", v.get_name()))
                    .collect();
                if !possible.is_empty() {
                    let _ = write!(help, " One of {}.", possible.join(", "));
                }
                let defaults: Vec<String> = arg
                    .get_default_values()
                    .iter()
                    .map(|v| v.to_string_lossy().into_owned())
                    .collect();
                let is_flag = matches!(arg.get_action(), ArgAction::SetTrue | ArgAction::SetFalse);
                if !defaults.is_empty() && !is_flag {
                    let _ = write!(help, " Default: `{}`.", defaults.join(" "));
                }
                if arg.is_required_set() {
                    help.push_str(" Required.");
                }
                let _ = writeln!(out, "| `{}` | {} |", arg_name(arg), cell(&help));
            }
        }
        let subs: Vec<&Command> = cmd
            .get_subcommands()
            .filter(|s| s.get_name() != "help" && !s.is_hide_set())
            .collect();
        if !subs.is_empty() {
            out.push_str("\n| command | what it does |\n|---|---|\n");
            for sub in &subs {
                let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
                let _ = writeln!(
                    out,
                    "| [`{}`](#{}) | {} |",
                    sub.get_name(),
                    anchor(&format!("{path} {}", sub.get_name())),
                    cell(&about)
                );
            }
        }
        for sub in subs {
            walk(sub, &format!("{path} {}", sub.get_name()), out);
        }
    }
    walk(&root, "brmcp", &mut out);
    out
}

/// The anchor GitHub gives a heading made of a code span.
fn anchor(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// Every man page: `brmcp.1`, then `brmcp-serve.1`, `brmcp-serve-credit.1`, ...
fn man_pages() -> Vec<(String, Vec<u8>)> {
    let mut root = brmcp::cli::command();
    root.build();
    let mut pages = Vec::new();
    fn walk(cmd: &Command, name: &str, pages: &mut Vec<(String, Vec<u8>)>) {
        if cmd.is_hide_set() {
            return;
        }
        let mut page = Vec::new();
        // clap takes a static name without its `string` feature; a test may leak it.
        let static_name: &'static str = Box::leak(name.to_owned().into_boxed_str());
        clap_mangen::Man::new(cmd.clone().name(static_name))
            .render(&mut page)
            .expect("render a man page");
        pages.push((format!("{name}.1"), page));
        for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
            walk(sub, &format!("{name}-{}", sub.get_name()), pages);
        }
    }
    walk(&root, "brmcp", &mut pages);
    pages
}

#[test]
fn reference_cli_and_man_pages_are_current() {
    let root = workspace();
    let mut failures = Vec::new();
    failures.extend(check(
        &root.join("docs/reference/cli.md"),
        cli_markdown().as_bytes(),
    ));
    let man_dir = root.join("docs/man");
    let pages = man_pages();
    for (name, page) in &pages {
        failures.extend(check(&man_dir.join(name), page));
    }
    // A page of a command that is gone is stale too.
    if let Ok(entries) = std::fs::read_dir(&man_dir) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !pages.iter().any(|(n, _)| *n == name) {
                if blessing() {
                    std::fs::remove_file(entry.path()).expect("remove a stale page");
                } else {
                    failures.push(format!("docs/man/{name} is no command's page"));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{}\nrun `BRMCP_BLESS=1 cargo test -p brmcp --test cli reference` and commit",
        failures.join("\n")
    );
}

#[test]
fn reference_cli_names_every_command_and_flag() {
    // The generator walks the parser; this checks it missed nothing visible.
    let text = cli_markdown();
    let mut root = brmcp::cli::command();
    root.build();
    fn walk(cmd: &Command, path: &str, text: &str) {
        assert!(
            text.contains(&format!("## `{path}`")),
            "no section for {path}"
        );
        for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
            if let Some(long) = arg.get_long()
                && !matches!(long, "help" | "version" | "log-level")
            {
                assert!(text.contains(&format!("--{long}")), "{path}: no --{long}");
            }
        }
        for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
            walk(sub, &format!("{path} {}", sub.get_name()), text);
        }
    }
    walk(&root, "brmcp", &text);
}

#[test]
fn completions_print_a_script_for_each_shell() {
    for (shell, marker) in [
        ("bash", "complete -F _brmcp"),
        ("zsh", "#compdef brmcp"),
        ("fish", "complete -c brmcp"),
    ] {
        let out = brmcp(&["completions", shell]).output().expect("brmcp");
        assert!(out.status.success(), "completions {shell}: {out:?}");
        let script = String::from_utf8(out.stdout).expect("utf-8");
        assert!(script.contains(marker), "{shell}: no {marker:?}");
        for word in ["serve", "bridge", "approvals", "--datadir"] {
            assert!(script.contains(word), "{shell} script lacks {word}");
        }
    }
    let out = brmcp(&["completions", "tcsh"]).output().expect("brmcp");
    assert_eq!(
        out.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
}

#[test]
fn version_names_the_commit() {
    let out = brmcp(&["--version"]).output().expect("brmcp");
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let rest = text
        .trim()
        .strip_prefix(&format!("brmcp {} (", env!("CARGO_PKG_VERSION")))
        .unwrap_or_else(|| panic!("--version printed {text:?}"));
    let commit = rest.strip_suffix(')').expect("closing parenthesis");
    assert!(
        commit == "unknown"
            || (commit.len() == 12 && commit.chars().all(|c| c.is_ascii_hexdigit())),
        "not a commit: {commit:?}"
    );
}

/// The field names serde reads for `T`: a deserializer that records the list a derived
/// `Deserialize` passes to `deserialize_struct`, then stops.
fn serde_fields<'de, T: serde::Deserialize<'de>>() -> Vec<String> {
    use serde::de::{Error as _, Visitor, value::Error};

    struct Recorder(Option<&'static [&'static str]>);
    impl<'de> serde::Deserializer<'de> for &mut Recorder {
        type Error = Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Error> {
            Err(Error::custom("not a struct"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Error> {
            self.0 = Some(fields);
            Err(Error::custom("recorded"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
            identifier ignored_any
        }
    }
    let mut recorder = Recorder(None);
    let _ = T::deserialize(&mut recorder);
    recorder
        .0
        .expect("a struct")
        .iter()
        .map(|f| (*f).to_owned())
        .collect()
}

/// The strings of `const NAME: [&str; N] = [...]` in a source file of the workspace:
/// the key lists the hand-written parsers check keys against.
fn const_list(file: &str, name: &str) -> Vec<String> {
    let text = std::fs::read_to_string(workspace().join(file)).expect(file);
    let start = text
        .find(&format!("const {name}: [&str; "))
        .unwrap_or_else(|| panic!("no {name} in {file}"));
    let body = &text[start..];
    let body = &body[body.find("= [").expect("a list")..body.find("];").expect("list end")];
    body.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// The first column of the table after each `<!-- keys: NAME -->` of the page.
fn documented_keys(page: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let mut lines = page.lines();
    while let Some(line) = lines.next() {
        let Some(name) = line
            .trim()
            .strip_prefix("<!-- keys: ")
            .and_then(|l| l.strip_suffix(" -->"))
        else {
            continue;
        };
        let keys = lines
            .by_ref()
            .skip(2) // the header and the rule
            .take_while(|l| l.starts_with('|'))
            .map(|row| {
                row.split('|')
                    .nth(1)
                    .expect("a first cell")
                    .trim()
                    .trim_matches('`')
                    .to_owned()
            })
            .collect();
        out.push((name.to_owned(), keys));
    }
    out
}

#[test]
fn reference_config_lists_exactly_the_keys_the_parsers_accept() {
    use brmcp::bridge::{AgentEntry, DirectoryEntry, Settings};
    use brmcp::directory::{AutoFund, Policy, TestSpec};

    let parsed: Vec<(&str, Vec<String>)> = vec![
        (
            "brmcp.json",
            brmcp::server::CONFIG_KEYS
                .iter()
                .map(|k| (*k).to_owned())
                .collect(),
        ),
        (
            "brmcp.json upstreams[]",
            const_list("brmcp/src/server/upstream/config/parse.rs", "KEYS"),
        ),
        (
            "brmcp.json directory",
            const_list("brmcp/src/directory/block.rs", "KEYS"),
        ),
        ("brmcp.json directory.test", serde_fields::<TestSpec>()),
        ("brmcp.json directory.auto_fund", serde_fields::<AutoFund>()),
        ("mcpclient.json", serde_fields::<Settings>()),
        ("mcpclient.json agents[]", serde_fields::<AgentEntry>()),
        (
            "mcpclient.json directories[]",
            serde_fields::<DirectoryEntry>(),
        ),
        ("brmcpdir.json", serde_fields::<Policy>()),
        (
            ".conf",
            brmcp_clientrpc::KNOWN_KEYS
                .iter()
                .map(|k| (*k).to_owned())
                .collect(),
        ),
    ];
    // The registrant block reads auto_fund with its own list too: the two agree.
    assert_eq!(
        const_list("brmcp/src/directory/block.rs", "AUTO_FUND_KEYS"),
        serde_fields::<AutoFund>()
    );
    let page =
        std::fs::read_to_string(workspace().join("docs/reference/config.md")).expect("config.md");
    let documented = documented_keys(&page);
    let names: Vec<&str> = documented.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        parsed.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        "the page's tables"
    );
    for ((name, listed), (_, accepted)) in documented.iter().zip(&parsed) {
        let mut listed = listed.clone();
        let mut accepted = accepted.clone();
        listed.sort();
        accepted.sort();
        assert_eq!(
            listed, accepted,
            "{name}: the page's keys, the parser's keys"
        );
    }
}

/// `text` with each rustdoc link (`[name](crate::path)`) left as its name: the paths
/// are the code's, not the page's.
fn without_rustdoc_links(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(end) = after.find(')') else { break };
        let target = &after[..end];
        let name_start = rest[..at].rfind('[');
        match name_start {
            Some(open) if target.contains("::") => {
                out.push_str(&rest[..open]);
                out.push_str(&rest[open + 1..at]);
            }
            _ => {
                out.push_str(&rest[..at + 2]);
                out.push_str(target);
                out.push(')');
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

/// The JSON-RPC error codes of `brmcp-adapters/src/protocol.rs` with their doc
/// comments, as the table of the errors page.
fn error_code_table() -> String {
    let text = std::fs::read_to_string(workspace().join("brmcp-adapters/src/protocol.rs"))
        .expect("protocol.rs");
    let mut table = String::from("| code | name | meaning |\n|---|---|---|\n");
    let mut doc: Vec<String> = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(d) = line.strip_prefix("///") {
            doc.push(d.trim().to_owned());
            continue;
        }
        if let Some(rest) = line.strip_prefix("pub const ")
            && let Some((name, value)) = rest.split_once(": ErrorCode = ErrorCode(")
        {
            let code = value.trim_end_matches(");");
            let meaning = without_rustdoc_links(&doc.join(" "));
            let _ = writeln!(table, "| `{code}` | `{name}` | {} |", cell(&meaning));
        }
        doc.clear();
    }
    table
}

#[test]
fn reference_errors_table_is_current() {
    let path = workspace().join("docs/reference/errors.md");
    let page = std::fs::read_to_string(&path).expect("errors.md");
    let begin = "<!-- generated: protocol.rs error codes -->\n";
    let end = "<!-- end generated -->";
    let start = page.find(begin).expect("the generated table's start") + begin.len();
    let stop = start + page[start..].find(end).expect("the generated table's end");
    let table = error_code_table();
    assert!(table.lines().count() > 4, "no codes read:\n{table}");
    if blessing() {
        let page = format!("{}{table}{}", &page[..start], &page[stop..]);
        std::fs::write(&path, page).expect("write errors.md");
        return;
    }
    assert_eq!(
        &page[start..stop],
        table,
        "errors.md's table differs from protocol.rs: run `BRMCP_BLESS=1 cargo test -p brmcp --test cli reference`"
    );
}
