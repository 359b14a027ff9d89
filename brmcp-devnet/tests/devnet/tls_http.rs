//! The devnet's TLS and HTTP layer: brclient's certificate shapes, a required client
//! certificate, brclientd's layout, basic auth before the upgrade, `/ws` only, and a
//! config file that points a client at its node.

use std::sync::Arc;

use crate::common::{Opts, connect, connect_with, http_request, start, start_specs};
use brmcp_devnet::{CertMode, DevnetConfig, NodeSpec};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier as _;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use serde_json::json;

#[tokio::test]
async fn pinned_server_cert_and_required_client_cert() {
    let net = start(&["alice", "bob"], DevnetConfig::default()).await;
    let alice = net.node("alice");
    let bob = net.node("bob");

    // The node's own client certificate, with its rpc.cert pinned, connects.
    let mut c = connect(&alice).await;
    let v = c.ok("VersionService.Version", json!({})).await;
    assert_eq!(v["appName"], "brclient");

    // No client certificate: refused during the handshake.
    let mut no_cert = Opts::for_node(&alice);
    no_cert.client = None;
    let err = connect_with(&alice, &no_cert)
        .await
        .err()
        .expect("refused without a client cert");
    assert!(
        format!("{err:?}").contains("CertificateRequired"),
        "{err:?}"
    );

    // A client certificate from another node's CA: refused.
    let mut foreign = Opts::for_node(&alice);
    foreign.client = Some((bob.certs.client_cert.clone(), bob.certs.client_key.clone()));
    assert!(connect_with(&alice, &foreign).await.is_err());

    // Pinning another node's server certificate: the client refuses alice.
    let mut wrong_pin = Opts::for_node(&alice);
    wrong_pin.pin = bob.certs.server_cert.clone();
    assert!(connect_with(&alice, &wrong_pin).await.is_err());

    net.devnet.shutdown().await;
}

#[tokio::test]
async fn brclient_server_cert_is_a_self_signed_ca() {
    let net = start(&["alice"], DevnetConfig::default()).await;
    let alice = net.node("alice");
    for p in [
        &alice.certs.server_cert,
        &alice.certs.ca_cert,
        &alice.certs.client_cert,
    ] {
        let pem = std::fs::read_to_string(p).unwrap();
        assert!(
            pem.starts_with("-----BEGIN CERTIFICATE-----"),
            "{}",
            p.display()
        );
    }
    for p in [&alice.certs.server_key, &alice.certs.client_key] {
        let pem = std::fs::read_to_string(p).unwrap();
        assert!(
            pem.starts_with("-----BEGIN PRIVATE KEY-----"),
            "PKCS#8: {}",
            p.display()
        );
    }
    assert!(
        alice.certs.ca_key.is_none(),
        "brclient does not keep the client CA key"
    );

    // The stock webpki verifier, rpc.cert as its only root, refuses rpc.cert as an end
    // entity because it is a CA: the shape brclient writes.
    let der = CertificateDer::from_pem_file(&alice.certs.server_cert).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(der.clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .unwrap();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let err = verifier
        .verify_server_cert(&der, &[], &name, &[], UnixTime::now())
        .unwrap_err();
    assert!(format!("{err:?}").contains("CaUsedAsEndEntity"), "{err:?}");

    // Certificates already in the directory are reused by a new devnet there.
    let before = std::fs::read(&alice.certs.server_cert).unwrap();
    let dir = net.dir.path().to_path_buf();
    net.devnet.shutdown().await;
    let again = brmcp_devnet::Devnet::start(&dir, &["alice"]).await.unwrap();
    let alice2 = again.node_by_nick("alice").unwrap();
    assert_eq!(std::fs::read(&alice2.certs.server_cert).unwrap(), before);
    let mut c = connect(&alice2).await;
    c.ok("VersionService.Version", json!({})).await;
    again.shutdown().await;
}

#[tokio::test]
async fn brclientd_layout_connects_with_its_leaf_pinned() {
    let net = start_specs(
        vec![NodeSpec::new("daemon").cert_mode(CertMode::Brclientd)],
        DevnetConfig::default(),
    )
    .await;
    let d = net.node("daemon");
    assert!(d.certs.server_cert.ends_with("rpc/rpc.cert"));
    assert!(
        d.certs.ca_key.as_ref().is_some_and(|k| k.exists()),
        "brclientd keeps its CA key"
    );

    // The leaf is not a CA: the stock verifier accepts it when the CA is the root.
    let leaf = CertificateDer::from_pem_file(&d.certs.server_cert).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(&d.certs.ca_cert).unwrap())
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .unwrap();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    verifier
        .verify_server_cert(&leaf, &[], &name, &[], UnixTime::now())
        .expect("CA-signed server leaf");

    let mut c = connect(&d).await;
    assert_eq!(
        c.ok("VersionService.Version", json!({})).await["appName"],
        "brclientd"
    );
    net.devnet.shutdown().await;
}

#[tokio::test]
async fn basic_auth_is_checked_before_the_upgrade() {
    let net = start_specs(
        vec![NodeSpec::new("alice").basic_auth("bot", "s3cret")],
        DevnetConfig::default(),
    )
    .await;
    let alice = net.node("alice");
    assert_eq!(
        (alice.rpc_user.as_str(), alice.rpc_pass.as_str()),
        ("bot", "s3cret")
    );

    let missing = connect_with(&alice, &Opts::for_node(&alice))
        .await
        .err()
        .unwrap();
    assert_eq!(missing.status(), Some(401));
    let (status, text) = http_request(
        &alice,
        &Opts::for_node(&alice),
        "GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    )
    .await;
    assert_eq!(status, 401);
    assert!(
        text.contains("Www-Authenticate: Basic realm=\"Restricted\""),
        "{text}"
    );

    let mut wrong = Opts::for_node(&alice);
    wrong.auth = Some(("bot".into(), "nope".into()));
    assert_eq!(
        connect_with(&alice, &wrong).await.err().unwrap().status(),
        Some(403)
    );

    let mut right = Opts::for_node(&alice);
    right.auth = Some(("bot".into(), "s3cret".into()));
    let mut c = connect_with(&alice, &right).await.unwrap();
    c.ok("VersionService.Version", json!({})).await;
    net.devnet.shutdown().await;
}

#[tokio::test]
async fn only_ws_upgrades_and_other_paths_are_404() {
    let net = start(&["alice"], DevnetConfig::default()).await;
    let alice = net.node("alice");
    let opts = Opts::for_node(&alice);
    for path in ["/", "/index", "/ws/"] {
        let head = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
        let (status, text) = http_request(&alice, &opts, &head).await;
        assert_eq!(status, 404, "{path}: {text}");
        assert!(text.ends_with("404 page not found\n"), "{text}");
    }
    // `/ws` without the upgrade headers: gorilla's 400.
    let (status, _) =
        http_request(&alice, &opts, "GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").await;
    assert_eq!(status, 400);
    let mut root = Opts::for_node(&alice);
    root.path = "/".into();
    assert_eq!(
        connect_with(&alice, &root).await.err().unwrap().status(),
        Some(404)
    );
    net.devnet.shutdown().await;
}

#[tokio::test]
async fn config_file_points_a_client_at_its_node() {
    let net = start(&["alice"], DevnetConfig::default()).await;
    let alice = net.node("alice");
    let text = std::fs::read_to_string(&alice.config_path).unwrap();
    assert!(alice.config_path.ends_with("alice/brmcp-serve.conf"));
    let kv: std::collections::HashMap<&str, &str> = text
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim(), v.trim()))
        .collect();
    assert_eq!(kv["brrpcurl"], alice.url);
    assert_eq!(kv["rpcuser"], alice.rpc_user);
    assert_eq!(kv["rpcpass"], alice.rpc_pass);
    assert_eq!(alice.rpc_user.len(), 8);
    assert_eq!(alice.rpc_pass.len(), 16);

    // Everything a client needs, from the file alone.
    let opts = Opts {
        client: Some((kv["clientcertpath"].into(), kv["clientkeypath"].into())),
        pin: kv["servercertpath"].into(),
        auth: Some((kv["rpcuser"].into(), kv["rpcpass"].into())),
        path: "/ws".into(),
    };
    let mut c = connect_with(&alice, &opts).await.unwrap();
    let id = c.ok("ChatService.UserPublicIdentity", json!({})).await;
    assert_eq!(id["nick"], "alice");
    assert_eq!(crate::common::b64(&id["identity"]), alice.uid);
    net.devnet.shutdown().await;
}

#[tokio::test]
async fn node_specs_and_setup_errors() {
    let uid = [0x5a; 32];
    let net = start_specs(
        vec![
            NodeSpec::new("open").without_client_auth().uid(uid),
            NodeSpec::new("away").offline(),
        ],
        DevnetConfig::default(),
    )
    .await;
    let open = net.node("open");
    assert_eq!(open.uid, uid);
    assert_eq!(open.uid_hex(), "5a".repeat(32));
    let nodes = net.devnet.nodes();
    assert_eq!(
        nodes.iter().map(|n| n.nick.as_str()).collect::<Vec<_>>(),
        ["open", "away"]
    );
    assert_eq!(net.devnet.node(nodes[1].id).unwrap().nick, "away");

    // Without client auth, a client without a certificate gets in.
    let mut no_cert = Opts::for_node(&open);
    no_cert.client = None;
    let mut c = connect_with(&open, &no_cert).await.unwrap();
    c.ok(
        "ChatService.PM",
        json!({"user": "away", "msg": {"message": "queued"}}),
    )
    .await;
    let away = net.node("away");
    assert_eq!(
        net.devnet.relay_queue_len(away.id).unwrap(),
        1,
        "started offline"
    );

    use brmcp_devnet::DevnetError;
    for (spec, what) in [
        (NodeSpec::new("open"), "duplicate nick"),
        (NodeSpec::new("x").uid(uid), "duplicate uid"),
        (NodeSpec::new("../up"), "invalid nick"),
        (NodeSpec::new(""), "invalid nick"),
    ] {
        let err = net.devnet.add_node(spec).await.unwrap_err();
        let ok = matches!(
            (&err, what),
            (DevnetError::DuplicateNick(_), "duplicate nick")
                | (DevnetError::DuplicateUid(_), "duplicate uid")
                | (DevnetError::InvalidNick(_), "invalid nick")
        );
        assert!(ok, "{what}: {err}");
    }
    let dup = brmcp_devnet::Devnet::start(net.dir.path().join("dup"), &["a", "a"]).await;
    assert!(matches!(dup, Err(DevnetError::DuplicateNick(_))));
    net.devnet.shutdown().await;
}
