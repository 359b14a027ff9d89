//! `brmcp wire`: read PM bodies and say what they are; frame a message into PM bodies.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use brmcp_adapters::wire::{
    Chunks, DEFAULT_CHUNK_LEN, MessageId, Mode, SessionId, encode_part, parse_with,
};
use clap::Subcommand;

use super::CliError;

#[derive(Debug, Subcommand)]
pub(super) enum WireCommand {
    /// Read PM bodies, one per line, and say whether each is a valid part and why not.
    ///
    /// Prints one line per input: `part ...` with the header and the decoded size,
    /// `chat: ...` for text that is not brmcp traffic, or `refused: ...` with the reason.
    /// Exits 1 when any line is refused.
    Inspect {
        /// Accept only the encoder's canonical form.
        #[arg(long)]
        canonical: bool,
        /// Files to read; standard input when none.
        files: Vec<PathBuf>,
    },
    /// Frame one JSON-RPC message into PM bodies, one per line.
    Encode {
        /// Session id (1 to 32 lowercase hex); a random one when absent.
        #[arg(long)]
        sid: Option<String>,
        /// Raw bytes per part.
        #[arg(long, default_value_t = DEFAULT_CHUNK_LEN)]
        chunk: usize,
        /// Deadline in seconds from now; 0 for none.
        #[arg(long, default_value_t = 600)]
        ttl: u64,
        /// File holding the message; standard input when absent or `-`.
        file: Option<PathBuf>,
    },
}

pub(super) fn run(cmd: WireCommand) -> Result<ExitCode, CliError> {
    match cmd {
        WireCommand::Inspect { canonical, files } => inspect(canonical, &files),
        WireCommand::Encode {
            sid,
            chunk,
            ttl,
            file,
        } => encode(sid.as_deref(), chunk, ttl, file),
    }
}

fn inspect(canonical: bool, files: &[PathBuf]) -> Result<ExitCode, CliError> {
    let mode = if canonical {
        Mode::Canonical
    } else {
        Mode::Compatible
    };
    let mut out = std::io::stdout().lock();
    let mut refused = 0usize;
    let mut inspect_lines = |reader: &mut dyn BufRead| -> Result<(), CliError> {
        for line in reader.split(b'\n') {
            let mut line = line?;
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            let verdict = describe(&line, mode);
            if verdict.starts_with("refused") {
                refused += 1;
            }
            writeln!(out, "{verdict}")?;
        }
        Ok(())
    };
    if files.is_empty() {
        inspect_lines(&mut std::io::stdin().lock())?;
    }
    for path in files {
        let file = File::open(path).map_err(|e| CliError(format!("{}: {e}", path.display())))?;
        inspect_lines(&mut BufReader::new(file))?;
    }
    Ok(if refused == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// One line saying what `pm` is.
fn describe(pm: &[u8], mode: Mode) -> String {
    let part = match parse_with(pm, mode) {
        Ok(part) => part,
        Err(e) if e.is_foreign() => return format!("chat: {e}"),
        Err(e) => return format!("refused: {e}"),
    };
    let mut chunk = vec![0u8; part.decoded_len_max()];
    match part.decode_body(&mut chunk) {
        Ok(n) => format!(
            "part sid={} mid={} seq={}/{} exp={} bytes={n}",
            part.sid(),
            part.mid(),
            part.seq(),
            part.total(),
            part.exp()
        ),
        Err(e) => format!("refused: {e}"),
    }
}

fn encode(
    sid: Option<&str>,
    chunk: usize,
    ttl: u64,
    file: Option<PathBuf>,
) -> Result<ExitCode, CliError> {
    let sid = match sid {
        Some(s) => s
            .parse::<SessionId>()
            .map_err(|e| CliError(format!("--sid {s:?}: {e}")))?,
        None => SessionId::random()?,
    };
    let mut message = Vec::new();
    match file.as_deref() {
        None => std::io::stdin().read_to_end(&mut message)?,
        Some(p) if p.as_os_str() == "-" => std::io::stdin().read_to_end(&mut message)?,
        Some(p) => File::open(p)
            .and_then(|mut f| f.read_to_end(&mut message))
            .map_err(|e| CliError(format!("{}: {e}", p.display())))?,
    };
    let message = message.trim_ascii();
    serde_json::from_slice::<serde::de::IgnoredAny>(message)
        .map_err(|e| CliError(format!("the message is not JSON: {e}")))?;
    let exp = if ttl == 0 {
        0
    } else {
        let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
        i64::try_from(now.saturating_add(ttl)).unwrap_or(i64::MAX)
    };
    let chunks = Chunks::new(sid, MessageId::random()?, exp, message, chunk)?;
    let mut buf = vec![0u8; chunks.max_pm_len()];
    let mut out = std::io::stdout().lock();
    for (header, part) in chunks {
        let n = encode_part(&header, part, &mut buf)?;
        out.write_all(&buf[..n])?;
        out.write_all(b"\n")?;
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describe_says_what_each_line_is() {
        assert_eq!(
            describe(
                b"--mcp[v=1,sid=aa,mid=bb,seq=1/2,exp=0]--QUJD",
                Mode::Compatible
            ),
            "part sid=aa mid=bb seq=1/2 exp=0 bytes=3"
        );
        assert_eq!(
            describe(b"hello there", Mode::Compatible),
            "chat: not an envelope"
        );
        assert_eq!(
            describe(
                b"--mcp[v=1,sid=aa,mid=bb,seq=3/2,exp=0]--QUJD",
                Mode::Compatible
            ),
            "refused: bad seq"
        );
        assert_eq!(
            describe(
                b"--mcp[v=1,sid=aa,mid=bb,seq=1/1,exp=0]--QU!D",
                Mode::Compatible
            ),
            "refused: bad base64 body at byte 2"
        );
        assert_eq!(
            describe(
                b"--mcp[v=01,sid=aa,mid=bb,seq=1/1,exp=0]--QUJD",
                Mode::Canonical
            ),
            "refused: non-canonical number in v"
        );
    }
}
