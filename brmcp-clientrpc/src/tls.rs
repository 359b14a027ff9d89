//! TLS for clientrpc: a server verifier that pins `rpc.cert` by DER equality and also
//! accepts a chain to a configured CA, and the client certificate.
//!
//! brclient's `rpc.cert` is a self-signed, CA-flagged Ed25519 certificate. webpki
//! refuses such a certificate as an end entity (`CaUsedAsEndEntity`), even when it is
//! the only root. Go accepts it because a leaf that is itself in the root pool
//! verifies; the pin reproduces that. brclientd instead serves a CA-signed leaf, which
//! the chain path verifies, hostname included. The crypto provider is ring.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, Error, OtherError, RootCertStore,
    SignatureScheme,
};

use super::config::ClientRpcConfig;
use super::error::ClientRpcError;

/// The server's certificate is not a pinned one, and (with the chain's error, if
/// there are roots) chains to no root.
#[derive(Debug, Clone)]
pub(crate) struct NotTrusted(Option<Error>);

impl NotTrusted {
    /// Finds one inside a handshake error.
    pub(crate) fn within(error: &Error) -> Option<&Self> {
        match error {
            Error::InvalidCertificate(CertificateError::Other(other)) => other.0.downcast_ref(),
            _ => None,
        }
    }
}

impl std::fmt::Display for NotTrusted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("not the pinned server certificate")?;
        match &self.0 {
            Some(e) => write!(f, ", and no trusted chain: {e}"),
            None => Ok(()),
        }
    }
}

impl std::error::Error for NotTrusted {}

/// Trusts a server certificate equal to a pinned one, or chaining to a root.
#[derive(Debug)]
struct PinnedVerifier {
    pins: Vec<CertificateDer<'static>>,
    chain: Option<Arc<WebPkiServerVerifier>>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for PinnedVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        if self
            .pins
            .iter()
            .any(|pin| pin.as_ref() == end_entity.as_ref())
        {
            // The exact certificate we were given: its identity is the pin itself.
            return Ok(ServerCertVerified::assertion());
        }
        let chain_error = match &self.chain {
            Some(chain) => {
                match chain.verify_server_cert(
                    end_entity,
                    intermediates,
                    server_name,
                    ocsp_response,
                    now,
                ) {
                    Ok(verified) => return Ok(verified),
                    Err(e) => Some(e),
                }
            }
            None => None,
        };
        Err(Error::InvalidCertificate(CertificateError::Other(
            OtherError(Arc::new(NotTrusted(chain_error))),
        )))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// Every certificate in a PEM text.
pub(crate) fn certs(
    pem: &[u8],
    what: &str,
) -> Result<Vec<CertificateDer<'static>>, ClientRpcError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ClientRpcError::Pem(format!("{what}: {e}")))?;
    if certs.is_empty() {
        return Err(ClientRpcError::Pem(format!("{what}: no certificate")));
    }
    Ok(certs)
}

/// Builds the rustls client config for `config`, reading its PEM sources now.
pub(crate) fn client_config(config: &ClientRpcConfig) -> Result<Arc<ClientConfig>, ClientRpcError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let pins = certs(&config.server_cert.load()?, "server certificate")?;

    // Roots: the pinned certificates (Go's root pool is `rpc.cert`, so a leaf signed by
    // it verifies too) and the extra CA. Certificates webpki cannot take as trust
    // anchors are skipped: they still work as pins.
    let mut roots = RootCertStore::empty();
    let mut extra = Vec::new();
    if let Some(ca) = &config.ca_cert {
        extra = certs(&ca.load()?, "CA certificate")?;
    }
    let (_added, _skipped) = roots.add_parsable_certificates(pins.iter().chain(&extra).cloned());
    let chain = if roots.is_empty() {
        None
    } else {
        let verifier =
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .map_err(|e| ClientRpcError::Tls(Box::new(e)))?;
        Some(verifier)
    };
    let verifier = PinnedVerifier {
        pins,
        chain,
        algorithms: provider.signature_verification_algorithms,
    };

    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| ClientRpcError::Tls(Box::new(e)))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier));
    let tls = match (&config.client_cert, &config.client_key) {
        (Some(cert), Some(key)) => {
            let chain = certs(&cert.load()?, "client certificate")?;
            let key = PrivateKeyDer::from_pem_slice(&key.load()?)
                .map_err(|e| ClientRpcError::Pem(format!("client key: {e}")))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| ClientRpcError::Tls(Box::new(e)))?
        }
        (None, None) => builder.with_no_client_auth(),
        _ => {
            return Err(ClientRpcError::Config(
                "a client certificate needs its key, and a key its certificate".into(),
            ));
        }
    };
    Ok(Arc::new(tls))
}
