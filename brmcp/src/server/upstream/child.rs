//! A command upstream's process: started in its own process group with a clean
//! environment, spoken to over its stdin and stdout with a bound on each line it sends;
//! killed (with what it started) when the connection closes or is dropped.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use process_wrap::tokio::{ChildWrapper, CommandWrap};
use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::AsyncRwTransport;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::process::{ChildStdin, ChildStdout};

use super::config::BASE_ENV;

/// How long a closed upstream may take to exit on its own (its stdin at end of file)
/// before its process group is killed: time to flush, short enough that a restart or
/// a stop is prompt.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// What else of serve's environment a command gets on Windows, where programs do not
/// start without it.
#[cfg(windows)]
const WINDOWS_ENV: [&str; 10] = [
    "SYSTEMROOT",
    "SYSTEMDRIVE",
    "WINDIR",
    "COMSPEC",
    "PATHEXT",
    "TEMP",
    "TMP",
    "USERPROFILE",
    "APPDATA",
    "LOCALAPPDATA",
];

/// Why a connection was ended on our side (a line over the bound), for the calls it
/// fails. Set at most once.
pub(crate) type Fault = Arc<OnceLock<String>>;

/// How to start one command upstream.
pub(crate) struct Spawn<'a> {
    pub(crate) command: &'a str,
    pub(crate) args: &'a [String],
    pub(crate) env: &'a BTreeMap<String, String>,
    pub(crate) pass_env: &'a [String],
    pub(crate) cwd: Option<&'a PathBuf>,
    /// The longest line (one JSON-RPC message) taken from it, in bytes.
    pub(crate) max_line: usize,
}

/// Whether serve's variable `name` is one every command gets.
fn is_base(name: &str) -> bool {
    #[cfg(windows)]
    let windows = WINDOWS_ENV.iter().any(|v| v.eq_ignore_ascii_case(name));
    #[cfg(not(windows))]
    let windows = false;
    windows || BASE_ENV.contains(&name) || name.starts_with("LC_")
}

/// The whole environment of a command: [`BASE_ENV`] and `LC_*` from `from` (serve's),
/// the variables `pass_env` names from it, then `env`'s values.
///
/// # Errors
/// A variable `pass_env` names is not set.
pub(crate) fn environment(
    from: impl IntoIterator<Item = (OsString, OsString)>,
    env: &BTreeMap<String, String>,
    pass_env: &[String],
) -> Result<BTreeMap<OsString, OsString>, String> {
    let from: BTreeMap<OsString, OsString> = from.into_iter().collect();
    let mut out: BTreeMap<OsString, OsString> = from
        .iter()
        .filter(|(k, _)| k.to_str().is_some_and(is_base))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for name in pass_env {
        let value = from
            .get(OsString::from(name).as_os_str())
            .ok_or_else(|| format!("the variable {name} named in pass_env is not set"))?;
        out.insert(name.into(), value.clone());
    }
    out.extend(env.iter().map(|(k, v)| (k.into(), v.into())));
    Ok(out)
}

/// Starts the command: its transport, its process id, and the fault its transport
/// sets when it ends the connection.
pub(crate) fn spawn(how: &Spawn<'_>) -> Result<(ChildTransport, Option<u32>, Fault), String> {
    let command = how.command;
    let env = environment(std::env::vars_os(), how.env, how.pass_env)?;
    let mut cmd = tokio::process::Command::new(command);
    cmd.args(how.args)
        .env_clear()
        .envs(env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    if let Some(cwd) = how.cwd {
        cmd.current_dir(cwd);
    }
    let mut cmd = CommandWrap::from(cmd);
    // Its own group: killing it (restart, stop) ends what it started too.
    #[cfg(unix)]
    cmd.wrap(process_wrap::tokio::ProcessGroup::leader());
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {command:?}: {e}"))?;
    let (Some(stdin), Some(stdout)) = (child.stdin().take(), child.stdout().take()) else {
        return Err(format!("cannot start {command:?}: no stdin or stdout"));
    };
    let pid = child.id();
    let (transport, fault) = line_transport(stdout, stdin, how.max_line);
    let child = ChildTransport {
        child: Some(child),
        transport,
    };
    Ok((child, pid, fault))
}

/// An upstream's stdout and stdin as its MCP client's transport: JSON-RPC lines read
/// through a [`LineCap`] of `max_line` bytes, and the fault it sets when it cuts.
pub(crate) fn line_transport<R, W>(
    stdout: R,
    stdin: W,
    max_line: usize,
) -> (AsyncRwTransport<RoleClient, LineCap<R>, W>, Fault)
where
    R: AsyncRead + Send + Unpin,
    W: tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let fault = Fault::default();
    let stdout = LineCap {
        inner: stdout,
        max: max_line,
        run: 0,
        ended: false,
        fault: fault.clone(),
    };
    // rmcp's own bound (which drops a long line and waits on) never comes first.
    let transport = AsyncRwTransport::new_client(stdout, stdin).with_max_line_length(max_line + 1);
    (transport, fault)
}

/// The upstream's stdout, ended (as at end of file) at the first line longer than
/// `max` bytes: that message could not reach a caller, and waiting for the rest of it
/// would hold memory without bound. The connection then closes and its calls fail.
pub(crate) struct LineCap<R> {
    inner: R,
    max: usize,
    /// Bytes of the current line so far.
    run: usize,
    ended: bool,
    fault: Fault,
}

impl<R: AsyncRead + Unpin> AsyncRead for LineCap<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        if this.ended {
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        std::task::ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        let mut cut = None;
        for (i, byte) in buf.filled()[before..].iter().enumerate() {
            if *byte == b'\n' {
                this.run = 0;
            } else {
                this.run += 1;
                if this.run > this.max {
                    cut = Some(before + i);
                    break;
                }
            }
        }
        if let Some(cut) = cut {
            // What came before the long line is delivered; then the stream ends.
            buf.set_filled(cut);
            this.ended = true;
            let _ = this.fault.set(format!(
                "it sent a message over {} bytes, more than a caller can be sent; its connection was closed",
                this.max
            ));
        }
        Poll::Ready(Ok(()))
    }
}

/// The transport over a child's stdin and stdout; closing or dropping it kills the
/// child's process group.
pub(crate) struct ChildTransport {
    child: Option<Box<dyn ChildWrapper>>,
    transport: AsyncRwTransport<RoleClient, LineCap<ChildStdout>, ChildStdin>,
}

impl Transport<RoleClient> for ChildTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.transport.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.transport.receive()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        // Its stdin at end of file, as the MCP stdio shutdown asks; then it is killed.
        self.transport.close().await?;
        if let Some(mut child) = self.child.take()
            && !matches!(
                tokio::time::timeout(CLOSE_GRACE, child.wait()).await,
                Ok(Ok(_))
            )
        {
            Box::into_pin(child.kill()).await?;
        }
        Ok(())
    }
}

impl Drop for ChildTransport {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SIGKILL to the group; tokio reaps the dropped child.
            let _ = child.start_kill();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs.iter().map(|(k, v)| (k.into(), v.into())).collect()
    }

    #[test]
    fn a_command_gets_only_the_base_the_named_and_the_set_variables() {
        let serve = vars(&[
            ("PATH", "/bin"),
            ("HOME", "/home/op"),
            ("LANG", "C.UTF-8"),
            ("LC_ALL", "C"),
            ("AWS_SECRET_ACCESS_KEY", "s3cret"),
            ("API_TOKEN", "t"),
        ]);
        let env = BTreeMap::from([("MODE".to_owned(), "x".to_owned())]);
        let got = environment(serve.clone(), &env, &["API_TOKEN".to_owned()]).unwrap();
        let names: Vec<&str> = got.keys().filter_map(|k| k.to_str()).collect();
        assert_eq!(
            names,
            ["API_TOKEN", "HOME", "LANG", "LC_ALL", "MODE", "PATH"]
        );
        let set = BTreeMap::from([("PATH".to_owned(), "/opt/bin".to_owned())]);
        let got = environment(serve.clone(), &set, &[]).unwrap();
        assert_eq!(
            got[OsString::from("PATH").as_os_str()],
            "/opt/bin",
            "env wins"
        );
        assert_eq!(
            environment(serve, &BTreeMap::new(), &["MISSING".to_owned()]).unwrap_err(),
            "the variable MISSING named in pass_env is not set"
        );
    }

    #[tokio::test]
    async fn a_line_over_the_bound_ends_the_stream_after_the_lines_before_it() {
        use tokio::io::AsyncReadExt;
        let data: &[u8] = b"{\"a\":1}\n0123456789abcdef\nnever";
        let fault = Fault::default();
        let mut capped = LineCap {
            inner: data,
            max: 10,
            run: 0,
            ended: false,
            fault: fault.clone(),
        };
        let mut out = Vec::new();
        capped.read_to_end(&mut out).await.unwrap();
        assert_eq!(out, b"{\"a\":1}\n0123456789");
        assert!(fault.get().is_some_and(|f| f.contains("over 10 bytes")));
    }
}
