//! The bisonbotkit config file: `brrpcurl` (newer kit) or `rpcurl` (older kit), cert
//! paths, basic auth, extra keys; and a host built from one connects.

use std::path::PathBuf;

use crate::common::Fake;
use brmcp_clientrpc::{
    BasicAuth, BotConfig, ClientRpcConfig, ClientRpcError, ClientRpcHost, PemSource, Streams,
};

/// What bisonbotkit's `LoadBotConfig` writes as defaults, in its order.
const KIT_DEFAULTS: &str = "datadir=/srv/bot
brrpcurl=wss://127.0.0.1:7676/ws
servercertpath=/srv/brclient/rpc.cert
clientcertpath=/srv/brclient/rpc-client.cert
clientkeypath=/srv/brclient/rpc-client.key
rpcuser=abcdefgh
rpcpass=0123456789abcdef
debug=info
logfile=/srv/bot/logs/brmcp-serve.log
maxlogfiles=5
maxbufferlines=1000
";

#[test]
fn newer_kit_file_with_brrpcurl() {
    let bot = BotConfig::parse(KIT_DEFAULTS).unwrap();
    assert_eq!(bot.url, "wss://127.0.0.1:7676/ws");
    assert_eq!(bot.datadir, Some(PathBuf::from("/srv/bot")));
    assert_eq!(
        bot.server_cert_path,
        PathBuf::from("/srv/brclient/rpc.cert")
    );
    assert_eq!(
        bot.client_cert_path,
        Some(PathBuf::from("/srv/brclient/rpc-client.cert"))
    );
    assert_eq!(
        bot.client_key_path,
        Some(PathBuf::from("/srv/brclient/rpc-client.key"))
    );
    assert_eq!(
        (bot.rpc_user.as_str(), bot.rpc_pass.as_str()),
        ("abcdefgh", "0123456789abcdef")
    );
    let extra: Vec<_> = bot.extra.keys().map(String::as_str).collect();
    assert_eq!(extra, ["debug", "logfile", "maxbufferlines", "maxlogfiles"]);

    let config = ClientRpcConfig::from_bot_config(&bot);
    assert_eq!(config.url, "wss://127.0.0.1:7676/ws");
    assert_eq!(
        config.server_cert,
        PemSource::File("/srv/brclient/rpc.cert".into())
    );
    assert_eq!(
        config.client_key,
        Some(PemSource::File("/srv/brclient/rpc-client.key".into()))
    );
    assert_eq!(
        config.basic_auth,
        Some(BasicAuth {
            user: "abcdefgh".into(),
            pass: "0123456789abcdef".into()
        })
    );
    assert!(!format!("{:?}", config.basic_auth).contains("0123456789abcdef"));
}

#[test]
fn older_kit_file_with_rpcurl() {
    let text = "rpcurl = wss://127.0.0.1:7777/ws \n\
        servercertpath=/srv/rpc.cert\n\
        \n\
        # a comment\n\
        rpcpass=ab=cd\n";
    let bot = BotConfig::parse(text).unwrap();
    assert_eq!(bot.url, "wss://127.0.0.1:7777/ws", "trimmed");
    assert_eq!(bot.client_cert_path, None);
    assert_eq!(bot.rpc_user, "");
    assert_eq!(bot.rpc_pass, "ab=cd", "split at the first '='");
    assert!(bot.extra.is_empty());
    let config = ClientRpcConfig::from_bot_config(&bot);
    assert_eq!(config.client_cert, None);
    assert!(
        config.basic_auth.is_some(),
        "a password alone still sends basic auth"
    );

    let both =
        BotConfig::parse("rpcurl=wss://old:1/ws\nbrrpcurl=wss://new:2/ws\nservercertpath=/x\n")
            .unwrap();
    assert_eq!(both.url, "wss://new:2/ws", "brrpcurl wins");

    let no_auth =
        BotConfig::parse("brrpcurl=wss://h:1/ws\nservercertpath=/x\nrpcuser=\nrpcpass=\n").unwrap();
    assert_eq!(ClientRpcConfig::from_bot_config(&no_auth).basic_auth, None);
}

#[test]
fn nonsense_is_refused_naming_the_file_line_key_and_reason() {
    let base = "brrpcurl=wss://h:1/ws\nservercertpath=/x\n";
    for (line, expect) in [
        ("servercertpth=/y", "line 3: servercertpth: unknown key"),
        ("a line without an equals sign", "line 3: not key=value"),
        ("rpcpass=a\nrpcpass=b", "line 4: rpcpass: given twice"),
        ("debug=loud", "line 3: debug: \"loud\" is not one of"),
        (
            "maxlogfiles=-5",
            "line 3: maxlogfiles: \"-5\" is not a whole number",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("brmcp-serve.conf");
        std::fs::write(&path, format!("{base}{line}\n")).unwrap();
        let err = BotConfig::load(&path).unwrap_err();
        assert!(matches!(err, ClientRpcError::Config(_)), "{err:?}");
        let shown = err.to_string();
        assert!(
            shown.contains(&format!("{}: {expect}", path.display())),
            "{line}: {shown}"
        );
    }
    let ok = BotConfig::parse(&format!("{base}debug=DEBUG\nmaxlogfiles=5\n")).unwrap();
    assert_eq!(ok.extra.get("debug").map(String::as_str), Some("DEBUG"));
}

#[test]
fn missing_keys_are_reported() {
    let err = BotConfig::parse("servercertpath=/x\n").unwrap_err();
    assert_eq!(err.to_string(), "config: brrpcurl is required");
    let err = BotConfig::parse("brrpcurl=wss://h:1/ws\n").unwrap_err();
    assert_eq!(err.to_string(), "config: servercertpath is required");
    let err = BotConfig::parse("brrpcurl=wss://h:1/ws\nservercertpath=/x\nclientcertpath=/c\n")
        .unwrap_err();
    assert!(matches!(err, ClientRpcError::Config(_)), "{err:?}");
}

#[test]
fn home_relative_paths_are_expanded() {
    let bot =
        BotConfig::parse("brrpcurl=wss://h:1/ws\nservercertpath=~/.brclient/rpc.cert\n").unwrap();
    match std::env::var_os("HOME") {
        Some(home) => assert_eq!(
            bot.server_cert_path,
            PathBuf::from(home).join(".brclient/rpc.cert")
        ),
        None => assert_eq!(bot.server_cert_path, PathBuf::from("~/.brclient/rpc.cert")),
    }
}

#[tokio::test]
async fn a_host_from_a_config_file_connects() {
    let (certs, fake) = Fake::brclient().await;
    let dir = certs.dir.path();
    // The older README's URL without `/ws`: the host adds it.
    let text = format!(
        "rpcurl=wss://127.0.0.1:{}\nservercertpath={}\nclientcertpath={}\nclientkeypath={}\n",
        fake.addr.port(),
        dir.join("rpc.cert").display(),
        dir.join("rpc-client.cert").display(),
        dir.join("rpc-client.key").display(),
    );
    let file = dir.join("brmcp-serve.conf");
    std::fs::write(&file, text).unwrap();
    let bot = BotConfig::load(&file).unwrap();
    let host = ClientRpcHost::new(ClientRpcConfig::from_bot_config(&bot)).unwrap();
    host.connect(Streams::new()).await.unwrap();
    assert_eq!(host.version().await.unwrap().app_name, "brclient");
    assert_eq!(fake.paths(), ["/ws"]);
    host.close();

    let err = BotConfig::load(dir.join("missing.conf")).unwrap_err();
    assert!(matches!(err, ClientRpcError::Io { .. }), "{err:?}");
}

#[test]
fn a_missing_certificate_names_the_file_and_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let cert = dir.path().join("rpc.cert");
    std::fs::write(&cert, "pem").unwrap();
    let conf = dir.path().join("brmcp-serve.conf");
    // Relative paths are read from the current directory, which is not `dir`.
    std::fs::write(
        &conf,
        format!(
            "brrpcurl=wss://h:1/ws\nservercertpath={}\nclientcertpath=./nowhere/rpc-client.cert\n\
             clientkeypath={}\n",
            cert.display(),
            cert.display()
        ),
    )
    .unwrap();
    let shown = BotConfig::load(&conf).unwrap_err().to_string();
    assert!(
        shown.contains(&format!(
            "{}: clientcertpath ./nowhere/rpc-client.cert: ",
            conf.display()
        )),
        "{shown}"
    );
}
