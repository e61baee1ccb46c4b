use std::time::Duration;

use crate::NetError;

/// The largest message a transport accepts (4 GiB): a frame announcing more is malformed.
pub const MAX_MESSAGE: u64 = 1 << 32;

/// Bytes and messages moved by one end of a link.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Payload bytes sent (frame headers not counted).
    pub sent_bytes: u64,
    /// Payload bytes received.
    pub received_bytes: u64,
    /// Messages sent.
    pub sent_messages: u64,
    /// Messages received.
    pub received_messages: u64,
}

/// One end of a reliable, ordered message link to one peer.
///
/// Sending never waits for the peer (a writer thread or a channel holds what the peer has not
/// read yet), so two parties may send to each other at once and then receive: that is one
/// round, [`Transport::exchange`].
pub trait Transport: Send {
    /// Queue a message for the peer.
    ///
    /// # Errors
    /// [`NetError::Closed`] if the link is down.
    fn send(&mut self, msg: &[u8]) -> Result<(), NetError>;

    /// The peer's next message.
    ///
    /// # Errors
    /// [`NetError::Closed`], [`NetError::Timeout`], or a malformed frame.
    fn recv(&mut self) -> Result<Vec<u8>, NetError>;

    /// Bytes and messages so far.
    fn counters(&self) -> Counters;

    /// How long [`Transport::recv`] waits (`None`: forever).
    fn set_timeout(&mut self, timeout: Option<Duration>);

    /// One round: send `msg`, then receive the peer's message of the same round.
    ///
    /// # Errors
    /// As [`Transport::send`] and [`Transport::recv`].
    fn exchange(&mut self, msg: &[u8]) -> Result<Vec<u8>, NetError> {
        self.exchange_idle(msg, &mut || {})
    }

    /// One round with work in the gap: send `msg`, run `idle` (a server drops its spent
    /// keys there) while the peer's message is on its way, then receive it.
    ///
    /// # Errors
    /// As [`Transport::send`] and [`Transport::recv`].
    fn exchange_idle(&mut self, msg: &[u8], idle: &mut dyn FnMut()) -> Result<Vec<u8>, NetError> {
        self.send(msg)?;
        idle();
        self.recv()
    }
}

impl<T: Transport + ?Sized> Transport for Box<T> {
    fn send(&mut self, msg: &[u8]) -> Result<(), NetError> {
        (**self).send(msg)
    }
    fn recv(&mut self) -> Result<Vec<u8>, NetError> {
        (**self).recv()
    }
    fn counters(&self) -> Counters {
        (**self).counters()
    }
    fn set_timeout(&mut self, timeout: Option<Duration>) {
        (**self).set_timeout(timeout);
    }
}
