//! The bisonbotkit-format config file a node writes for its clients: the kit's
//! defaults as its `LoadBotConfig` writes them, pointing at the node's URL and
//! certificate files, rendered by the client's own [`BotConfig`].

use std::path::Path;

use brmcp_clientrpc::BotConfig;

use super::certs::{CertPaths, write_file};
use super::{DevnetError, random_bytes};

/// The file name, as `brmcp-serve` names it in its data directory.
pub(crate) const CONFIG_FILE: &str = "brmcp-serve.conf";

/// `len` random characters from `[A-Za-z0-9]`, as the kit's random user and password.
pub(crate) fn random_token(len: usize) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let bytes: [u8; 32] = random_bytes();
    bytes
        .iter()
        .take(len)
        .map(|b| char::from(ALPHABET[usize::from(*b) % ALPHABET.len()]))
        .collect()
}

/// The file's text.
pub(crate) fn render(
    datadir: &Path,
    url: &str,
    certs: &CertPaths,
    user: &str,
    pass: &str,
) -> Result<String, DevnetError> {
    let mut conf = BotConfig::new(url, &certs.server_cert);
    conf.datadir = Some(datadir.to_path_buf());
    conf.client_cert_path = Some(certs.client_cert.clone());
    conf.client_key_path = Some(certs.client_key.clone());
    user.clone_into(&mut conf.rpc_user);
    pass.clone_into(&mut conf.rpc_pass);
    let log = datadir.join("logs").join("brmcp-serve.log");
    // The kit's defaults for what the bot's own logging uses.
    conf.extra = [
        ("debug", "info".to_owned()),
        ("logfile", log.display().to_string()),
        ("maxlogfiles", "5".to_owned()),
        ("maxbufferlines", "1000".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    conf.render().map_err(|e| {
        DevnetError::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            e.to_string(),
        ))
    })
}

/// Writes `<dir>/brmcp-serve.conf` and returns its path.
pub(crate) fn write(
    dir: &Path,
    url: &str,
    certs: &CertPaths,
    user: &str,
    pass: &str,
) -> Result<std::path::PathBuf, DevnetError> {
    let path = dir.join(CONFIG_FILE);
    // It holds rpcpass.
    write_file(&path, render(dir, url, certs, user, pass)?.as_bytes())?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_value_lines_in_kit_order() {
        let dir = Path::new("node");
        let certs = CertPaths {
            server_cert: dir.join("rpc.cert"),
            server_key: dir.join("rpc.key"),
            ca_cert: dir.join("rpc-ca.cert"),
            ca_key: None,
            client_cert: dir.join("rpc-client.cert"),
            client_key: dir.join("rpc-client.key"),
        };
        let text = render(dir, "wss://127.0.0.1:1234/ws", &certs, "u", "p").unwrap();
        let keys: Vec<&str> = text
            .lines()
            .filter_map(|l| l.split_once('=').map(|(k, _)| k))
            .collect();
        assert_eq!(
            keys,
            [
                "datadir",
                "brrpcurl",
                "servercertpath",
                "clientcertpath",
                "clientkeypath",
                "rpcuser",
                "rpcpass",
                "debug",
                "logfile",
                "maxlogfiles",
                "maxbufferlines"
            ]
        );
        assert!(text.contains("brrpcurl=wss://127.0.0.1:1234/ws\n"));
        assert!(text.contains(&format!("servercertpath={}\n", certs.server_cert.display())));
        assert_eq!(random_token(16).len(), 16);
    }
}
