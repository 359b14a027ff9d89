//! `brmcp devnet --directory`: a directory node with its policy (the second node its
//! operator) and the provider's registration config written, the command that runs
//! the directory printed and working, and the node the same after a restart.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long a process may take to print what is awaited.
const STARTUP: Duration = Duration::from_secs(60);

/// A child whose output lines arrive on a channel; killed on drop.
struct Proc {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Proc {
    fn spawn(args: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_brmcp"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn brmcp");
        let (tx, lines) = mpsc::channel();
        for out in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    let _ = tx.send(line);
                }
            });
        }
        Self {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Lines up to the first containing `what`.
    fn until(&mut self, what: &str) -> &[String] {
        let deadline = std::time::Instant::now() + STARTUP;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let done = line.contains(what);
                    self.seen.push(line);
                    if done {
                        return &self.seen;
                    }
                }
                Err(_) => panic!("no {what:?} in:\n{}", self.seen.join("\n")),
            }
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The uid the devnet listed for `nick`.
fn uid_of(lines: &[String], nick: &str) -> String {
    lines
        .iter()
        .find_map(|l| {
            let mut words = l.split_whitespace();
            (words.next() == Some(nick)).then(|| words.next().unwrap().to_owned())
        })
        .unwrap_or_else(|| panic!("no node {nick} in:\n{}", lines.join("\n")))
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn devnet_runs_a_directory_node_that_persists_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let net = dir.path().to_str().unwrap();
    let mut devnet = Proc::spawn(&["devnet", "--dir", net, "--directory"]);
    let lines = devnet.until("Ctrl-C stops").to_vec();
    let (alice, bob) = (uid_of(&lines, "alice"), uid_of(&lines, "bob"));
    let directory = uid_of(&lines, "directory");
    assert_eq!(directory.len(), 64);

    // The operator is bob; the fee is the devnet's; alice registers with it.
    let node = dir.path().join("directory");
    let policy = json(&node.join("brmcpdir.json"));
    assert_eq!(policy["admin_uids"], serde_json::json!([bob]));
    assert!(policy["listing_fee_atoms"].as_i64().unwrap() > 0);
    let serve = json(&dir.path().join("alice").join("brmcp.json"));
    assert_eq!(serve["allowed_uids"], serde_json::json!([bob, directory]));
    assert_eq!(
        serve["directory"]["register_at_uids"],
        serde_json::json!([directory])
    );
    assert_eq!(serve["directory"]["auto_fund"]["enabled"], true);

    // The printed command runs the directory on its node.
    let command = lines
        .iter()
        .find(|l| l.trim_start().starts_with("brmcp directory "))
        .expect("the directory's command")
        .trim()
        .to_owned();
    let args: Vec<&str> = command.split_whitespace().skip(1).collect();
    let mut running = Proc::spawn(&args);
    running.until(&format!("serving as {directory}"));
    drop(running);

    // A restart keeps the directory node's identity and the files written (an edit
    // to the policy survives).
    drop(devnet);
    let edited = policy.to_string().replace("devnet-directory", "edited");
    std::fs::write(node.join("brmcpdir.json"), &edited).unwrap();
    let mut again = Proc::spawn(&["devnet", "--dir", net, "--directory"]);
    let lines = again.until("Ctrl-C stops").to_vec();
    assert_eq!(uid_of(&lines, "directory"), directory);
    assert_eq!(uid_of(&lines, "alice"), alice);
    assert_eq!(
        std::fs::read_to_string(node.join("brmcpdir.json")).unwrap(),
        edited
    );
}
