//! TLS: brclient's self-signed CA-flagged Ed25519 `rpc.cert` is pinned by DER
//! equality; a different certificate is refused; the server refuses a client without
//! its certificate; brclientd's CA-signed leaf is accepted by pin or by chain.

use crate::common::{Certs, Fake, FakeOptions};
use brmcp_clientrpc::{ClientRpcConfig, ClientRpcError, ClientRpcHost, PemSource, Streams};

fn streams() -> Streams {
    Streams::new()
}

#[tokio::test]
async fn pinned_brclient_cert_connects() {
    let (certs, fake) = Fake::brclient().await;
    let host = ClientRpcHost::new(certs.config(&fake)).unwrap();
    host.connect(streams()).await.expect("connects");
    let version = host.version().await.unwrap();
    assert_eq!(version.app_name, "brclient");
    assert_eq!(fake.paths(), ["/ws"]);
    host.close();
}

#[tokio::test]
async fn different_server_cert_is_refused() {
    let certs = Certs::brclient();
    let other = Certs::brclient();
    let fake = Fake::start(&certs, FakeOptions::default()).await;
    let mut config = certs.config(&fake);
    config.server_cert = PemSource::Pem(other.server_cert.clone().into_bytes());
    let host = ClientRpcHost::new(config).unwrap();
    let err = host.connect(streams()).await.expect_err("wrong pin");
    assert!(matches!(err, ClientRpcError::Tls(_)), "{err:?}");
    assert!(
        err.to_string()
            .contains("not the pinned server certificate"),
        "{err}"
    );
    assert_eq!(fake.connections(), 0, "no websocket was opened");
}

#[tokio::test]
async fn server_refuses_a_client_without_its_certificate() {
    let (certs, fake) = Fake::brclient().await;
    let mut config = certs.config(&fake);
    config.client_cert = None;
    config.client_key = None;
    let host = ClientRpcHost::new(config).unwrap();
    let err = host.connect(streams()).await.expect_err("no client cert");
    // TLS 1.3: the client's handshake completes, the alert comes with the first read.
    assert!(matches!(err, ClientRpcError::Tls(_)), "{err:?}");
    assert!(err.to_string().contains("CertificateRequired"), "{err}");
}

#[tokio::test]
async fn brclientd_leaf_is_accepted_by_pin_and_by_chain() {
    let certs = Certs::brclientd();
    let fake = Fake::start(&certs, FakeOptions::default()).await;
    let dir = certs.dir.path();

    // Pinned leaf (`rpc.cert`).
    let host = ClientRpcHost::new(certs.config(&fake)).unwrap();
    host.connect(streams()).await.expect("pinned leaf");
    host.close();

    // `servercertpath` pointing at the CA, as Go's root pool allows.
    let config = ClientRpcConfig::new(fake.url(), dir.join("rpc-ca.cert"))
        .with_client_cert(dir.join("rpc-client.cert"), dir.join("rpc-client.key"));
    let host = ClientRpcHost::new(config).unwrap();
    host.connect(streams())
        .await
        .expect("chain to the pinned CA");
    host.close();

    // A pin that does not match, plus the CA configured separately.
    let unrelated = Certs::brclient();
    let config = ClientRpcConfig::new(
        fake.url(),
        PemSource::Pem(unrelated.server_cert.into_bytes()),
    )
    .with_ca_cert(dir.join("rpc-ca.cert"))
    .with_client_cert(dir.join("rpc-client.cert"), dir.join("rpc-client.key"));
    let host = ClientRpcHost::new(config).unwrap();
    host.connect(streams())
        .await
        .expect("chain to the extra CA");
    assert_eq!(host.version().await.unwrap().app_name, "brclient");
    host.close();
}

#[tokio::test]
async fn chain_checks_the_host_name_and_the_pin_does_not() {
    // A brclientd leaf for another host name only.
    let certs = Certs::brclientd_for(vec!["otherhost".into()]);
    let fake = Fake::start(&certs, FakeOptions::default()).await;
    let dir = certs.dir.path();
    let config = ClientRpcConfig::new(fake.url(), dir.join("rpc-ca.cert"))
        .with_client_cert(dir.join("rpc-client.cert"), dir.join("rpc-client.key"));
    let err = ClientRpcHost::new(config)
        .unwrap()
        .connect(streams())
        .await
        .expect_err("leaf not valid for 127.0.0.1");
    assert!(err.to_string().contains("not valid for name"), "{err}");

    // The exact pinned certificate is its own identity, whatever the URL's host.
    let host = ClientRpcHost::new(certs.config(&fake)).unwrap();
    host.connect(streams()).await.expect("pinned leaf");
    host.close();
}

#[tokio::test]
async fn missing_files_and_half_client_pairs_fail_at_construction() {
    let certs = Certs::brclient();
    let dir = certs.dir.path();
    let err = ClientRpcHost::new(ClientRpcConfig::new(DEFAULT, dir.join("nope.cert"))).unwrap_err();
    assert!(matches!(err, ClientRpcError::Io { .. }), "{err:?}");
    let mut config = ClientRpcConfig::brclient_dir(DEFAULT, dir);
    config.client_key = None;
    let err = ClientRpcHost::new(config).unwrap_err();
    assert!(matches!(err, ClientRpcError::Config(_)), "{err:?}");
    let err = ClientRpcHost::new(ClientRpcConfig::new(
        DEFAULT,
        PemSource::Pem(b"not pem".to_vec()),
    ))
    .unwrap_err();
    assert!(matches!(err, ClientRpcError::Pem(_)), "{err:?}");
    let err = ClientRpcHost::new(ClientRpcConfig::brclient_dir("ws://127.0.0.1:7676/ws", dir))
        .unwrap_err();
    assert!(matches!(err, ClientRpcError::Config(_)), "{err:?}");
}

const DEFAULT: &str = brmcp_clientrpc::DEFAULT_URL;
