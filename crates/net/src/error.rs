use std::time::Duration;

/// What can go wrong moving messages between parties.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// The peer closed the connection (or its process is gone).
    #[error("the peer closed the connection")]
    Closed,
    /// Nothing arrived from the peer within the timeout.
    #[error("no message from the peer within {0:?}")]
    Timeout(Duration),
    /// A frame announced more bytes than a message may have.
    #[error("malformed message: a frame of {0} bytes exceeds the limit of {1} bytes")]
    TooLarge(u64, u64),
    /// A message that does not parse.
    #[error("malformed message: {0}")]
    Malformed(String),
    /// The peer's certificate is not pinned, or the peer refused ours.
    #[error("untrusted certificate: {0}")]
    Untrusted(&'static str),
    /// The TLS layer failed.
    #[error("TLS: {0}")]
    Tls(rustls::Error),
    /// Reading or writing certificates and keys.
    #[error("certificates in {path}: {reason}")]
    Certificates {
        /// The file or folder.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A socket error.
    #[error("I/O: {0}")]
    Io(std::io::Error),
}

impl From<rustls::Error> for NetError {
    fn from(e: rustls::Error) -> Self {
        use rustls::{AlertDescription as A, Error as E};
        match e {
            E::InvalidCertificate(_) => {
                NetError::Untrusted("the peer's certificate is not one of the pinned fusefss certificates")
            }
            E::AlertReceived(
                A::BadCertificate | A::UnknownCA | A::CertificateUnknown | A::CertificateRequired,
            ) => NetError::Untrusted("the peer refused our certificate (it is not pinned there)"),
            e => NetError::Tls(e),
        }
    }
}

impl From<std::io::Error> for NetError {
    fn from(e: std::io::Error) -> Self {
        use std::io::ErrorKind::*;
        match e.kind() {
            UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe => NetError::Closed,
            _ => match e.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>()) {
                Some(t) => t.clone().into(),
                None => NetError::Io(e),
            },
        }
    }
}
