//! A message link over one TCP connection, plain or TLS.
//!
//! Receiving happens on the caller's thread; sending goes through a writer thread, so that
//! both parties can send a large message at once without either blocking on a full socket
//! (and sending overlaps with whatever the caller does next). For TLS, the rustls state is
//! shared behind a mutex that is held only to encrypt or decrypt, never across a socket call.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustls::pki_types::CertificateDer;

use crate::sim::{Schedule, wait_until};
use crate::{Counters, MAX_MESSAGE, NetError, NetSim, Transport};

/// Bytes read from the socket at a time.
const READ_CHUNK: usize = 1 << 18;
/// Plaintext encrypted per lock of the TLS state.
const TLS_CHUNK: usize = 1 << 16;

type Tls = Arc<Mutex<rustls::Connection>>;

enum Out {
    /// A framed message, and when the simulated network delivers it.
    Frame(Vec<u8>, Option<Instant>),
    /// Records rustls wants to send (for example an alert or a key update).
    Flush,
}

/// One end of a TCP or TLS link.
pub struct Conn {
    sock: TcpStream,
    tls: Option<Tls>,
    peer_cert: Option<CertificateDer<'static>>,
    raw: Vec<u8>,
    inbuf: Vec<u8>,
    pos: usize,
    eof: bool,
    writer: Option<Sender<Out>>,
    writer_thread: Option<JoinHandle<()>>,
    writer_error: Arc<Mutex<Option<String>>>,
    schedule: Option<Schedule>,
    timeout: Option<Duration>,
    /// The largest frame [`Transport::recv`] accepts now.
    max_frame: u64,
    /// How long one frame may take from its first byte to its last.
    frame_deadline: Option<Duration>,
    /// When the frame being received must be complete.
    frame_due: Option<Instant>,
    counters: Counters,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("peer", &self.sock.peer_addr().ok())
            .field("tls", &self.tls.is_some())
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

impl Conn {
    /// A plain TCP link (`TCP_NODELAY` is set), optionally over a simulated network.
    ///
    /// # Errors
    /// A socket error.
    pub fn plain(sock: TcpStream, sim: Option<NetSim>) -> Result<Conn, NetError> {
        Conn::start(sock, None, sim)
    }

    /// A TLS link: runs the handshake on `sock` (within `timeout`), then starts the link.
    ///
    /// # Errors
    /// A socket error, a timeout, or a TLS error (for example a certificate that is not
    /// pinned, on either side).
    pub fn tls(
        mut sock: TcpStream,
        mut conn: rustls::Connection,
        timeout: Option<Duration>,
        sim: Option<NetSim>,
    ) -> Result<Conn, NetError> {
        // The whole handshake within `timeout`, not each read: a peer that sends a byte now
        // and then cannot hold the connection (reliability probe, defect 2).
        let due = timeout.map(|t| Instant::now() + t);
        let timed_out = || NetError::Timeout(timeout.unwrap_or_default());
        sock.set_nodelay(true)?;
        while conn.is_handshaking() {
            if let Some(due) = due {
                let left = due.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(timed_out());
                }
                sock.set_read_timeout(Some(left))?;
                sock.set_write_timeout(Some(left))?;
            }
            if let Err(e) = conn.complete_io(&mut sock) {
                // Deliver our alert, if any, so that the peer learns why.
                let _ = conn.write_tls(&mut sock);
                return Err(match e.kind() {
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => timed_out(),
                    _ => e.into(),
                });
            }
        }
        sock.set_write_timeout(None)?;
        conn.set_buffer_limit(None);
        let peer = conn.peer_certificates().and_then(|c| c.first()).map(|c| c.clone().into_owned());
        let mut c = Conn::start(sock, Some(Arc::new(Mutex::new(conn))), sim)?;
        c.peer_cert = peer;
        c.set_timeout(timeout);
        // Records that came with the peer's last handshake flight (a client may send its first
        // message right behind its Finished) are already decrypted: take them now, or `recv`
        // would wait on the socket for bytes that never come.
        c.drain_plaintext()?;
        Ok(c)
    }

    fn start(sock: TcpStream, tls: Option<Tls>, sim: Option<NetSim>) -> Result<Conn, NetError> {
        sock.set_nodelay(true)?;
        let (tx, rx) = channel::<Out>();
        let writer_error = Arc::new(Mutex::new(None));
        let mut wsock = sock.try_clone()?;
        let (wtls, werr) = (tls.clone(), writer_error.clone());
        let writer_thread = std::thread::Builder::new().name("fusefss-writer".into()).spawn(move || {
            for out in rx {
                let r = match out {
                    Out::Frame(bytes, at) => {
                        if let Some(at) = at {
                            wait_until(at);
                        }
                        match &wtls {
                            None => wsock.write_all(&bytes),
                            Some(t) => {
                                bytes.chunks(TLS_CHUNK).try_for_each(|c| write_tls(t, &mut wsock, Some(c)))
                            }
                        }
                    }
                    Out::Flush => wtls.as_ref().map_or(Ok(()), |t| write_tls(t, &mut wsock, None)),
                };
                if let Err(e) = r {
                    *werr.lock().unwrap_or_else(PoisonError::into_inner) = Some(e.to_string());
                    let _ = wsock.shutdown(Shutdown::Both);
                    return;
                }
            }
            // The link was dropped: say goodbye.
            if let Some(t) = &wtls {
                t.lock().unwrap_or_else(PoisonError::into_inner).send_close_notify();
                let _ = write_tls(t, &mut wsock, None);
            }
            let _ = wsock.shutdown(Shutdown::Write);
        })?;
        Ok(Conn {
            sock,
            tls,
            peer_cert: None,
            raw: vec![0; READ_CHUNK],
            inbuf: vec![],
            pos: 0,
            eof: false,
            writer: Some(tx),
            writer_thread: Some(writer_thread),
            writer_error,
            schedule: sim.map(Schedule::new),
            timeout: None,
            max_frame: MAX_MESSAGE,
            frame_deadline: None,
            frame_due: None,
            counters: Counters::default(),
        })
    }

    /// The certificate the peer presented (TLS links).
    pub fn peer_certificate(&self) -> Option<&CertificateDer<'static>> {
        self.peer_cert.as_ref()
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> Option<std::net::SocketAddr> {
        self.sock.peer_addr().ok()
    }

    /// Close both directions now (the peer sees [`NetError::Closed`]).
    pub fn abort(&self) {
        let _ = self.sock.shutdown(Shutdown::Both);
    }

    /// Accept frames of at most `bytes` from now on (a longer announcement is
    /// [`NetError::TooLarge`] before any of its body is buffered); at most [`MAX_MESSAGE`].
    pub fn set_max_frame(&mut self, bytes: u64) {
        self.max_frame = bytes.min(MAX_MESSAGE);
    }

    /// Every frame must arrive whole within `limit` of its first byte (`None`: no limit),
    /// however the peer paces it; the wait for a frame to begin is [`Transport::set_timeout`].
    pub fn set_frame_deadline(&mut self, limit: Option<Duration>) {
        self.frame_deadline = limit;
    }

    /// Whether the peer has closed the link or it failed, checked without waiting: bytes
    /// already sent by the peer are kept for [`Transport::recv`].
    pub fn peer_gone(&mut self) -> bool {
        if self.eof || self.writer_failed().is_some() {
            return true;
        }
        if self.sock.set_nonblocking(true).is_err() {
            return true;
        }
        let due = self.frame_due.take();
        let gone = loop {
            match self.fill() {
                Ok(()) if self.eof => break true,
                Ok(()) => {}
                Err(NetError::Timeout(_)) => break false,
                Err(_) => break true,
            }
        };
        let _ = self.sock.set_nonblocking(false);
        self.frame_due = due;
        gone
    }

    fn writer_failed(&self) -> Option<NetError> {
        let e = self.writer_error.lock().unwrap_or_else(PoisonError::into_inner).clone()?;
        Some(NetError::Io(std::io::Error::other(e)))
    }

    /// The next complete frame in the buffer, if any.
    fn take_frame(&mut self) -> Result<Option<Vec<u8>>, NetError> {
        let avail = &self.inbuf[self.pos..];
        if avail.len() < 8 {
            return Ok(None);
        }
        let len = u64::from_le_bytes(avail[..8].try_into().expect("8 bytes"));
        if len > self.max_frame {
            return Err(NetError::TooLarge(len, self.max_frame));
        }
        let end = 8 + len as usize;
        if avail.len() < end {
            return Ok(None);
        }
        let msg = avail[8..end].to_vec();
        self.pos += end;
        if self.pos == self.inbuf.len() {
            self.inbuf.clear();
            self.pos = 0;
        } else if self.pos > self.inbuf.len() / 2 {
            self.inbuf.drain(..self.pos);
            self.pos = 0;
        }
        Ok(Some(msg))
    }

    /// Read from the socket once and add what it held to the plaintext buffer.
    fn fill(&mut self) -> Result<(), NetError> {
        if let Some(due) = self.frame_due {
            let left = due.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(NetError::Timeout(self.frame_deadline.unwrap_or_default()));
            }
            let wait = self.timeout.filter(|t| !t.is_zero()).map_or(left, |t| t.min(left));
            let _ = self.sock.set_read_timeout(Some(wait));
        }
        let n = match self.sock.read(&mut self.raw) {
            Ok(n) => n,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return Err(NetError::Timeout(self.timeout.unwrap_or_default()));
            }
            Err(e) => return Err(self.writer_failed().unwrap_or(e.into())),
        };
        if n == 0 {
            self.eof = true;
            return Ok(());
        }
        let Some(tls) = &self.tls else {
            self.inbuf.extend_from_slice(&self.raw[..n]);
            return Ok(());
        };
        let mut c = tls.lock().unwrap_or_else(PoisonError::into_inner);
        let mut slice = &self.raw[..n];
        while !slice.is_empty() {
            c.read_tls(&mut slice)?;
            if let Err(e) = c.process_new_packets() {
                drop(c);
                if let Some(w) = &self.writer {
                    let _ = w.send(Out::Flush);
                }
                return Err(e.into());
            }
            read_plaintext(&mut c, &mut self.inbuf, &mut self.eof)?;
        }
        let flush = c.wants_write();
        drop(c);
        if flush && let Some(w) = &self.writer {
            let _ = w.send(Out::Flush);
        }
        Ok(())
    }

    /// Move the plaintext the TLS session holds into the buffer.
    fn drain_plaintext(&mut self) -> Result<(), NetError> {
        let Some(tls) = self.tls.clone() else { return Ok(()) };
        let mut c = tls.lock().unwrap_or_else(PoisonError::into_inner);
        read_plaintext(&mut c, &mut self.inbuf, &mut self.eof)
    }
}

/// Move the plaintext a TLS session holds into `inbuf` (`eof` on the peer's close_notify).
/// (`read_to_end` appends into the vector's spare capacity: no zero-filled staging area per
/// record, which cost a 64 KB memset per 16 KB record.)
fn read_plaintext(c: &mut rustls::Connection, inbuf: &mut Vec<u8>, eof: &mut bool) -> Result<(), NetError> {
    match c.reader().read_to_end(inbuf) {
        Ok(_) => {
            *eof = true;
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Encrypt `plain` (if any) and send every pending record, holding the lock only to encrypt.
fn write_tls(tls: &Tls, sock: &mut TcpStream, plain: Option<&[u8]>) -> std::io::Result<()> {
    let mut records = Vec::new();
    {
        let mut c = tls.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(p) = plain {
            c.writer().write_all(p)?;
        }
        while c.wants_write() {
            c.write_tls(&mut records)?;
        }
    }
    sock.write_all(&records)
}

impl Transport for Conn {
    fn send(&mut self, msg: &[u8]) -> Result<(), NetError> {
        if let Some(e) = self.writer_failed() {
            return Err(e);
        }
        let mut frame = Vec::with_capacity(8 + msg.len());
        frame.extend_from_slice(&(msg.len() as u64).to_le_bytes());
        frame.extend_from_slice(msg);
        let at = self.schedule.as_mut().map(|s| s.deliver_at(msg.len()));
        self.writer
            .as_ref()
            .ok_or(NetError::Closed)?
            .send(Out::Frame(frame, at))
            .map_err(|_| NetError::Closed)?;
        self.counters.sent_bytes += msg.len() as u64;
        self.counters.sent_messages += 1;
        Ok(())
    }

    fn recv(&mut self) -> Result<Vec<u8>, NetError> {
        loop {
            if let Some(msg) = self.take_frame()? {
                self.counters.received_bytes += msg.len() as u64;
                self.counters.received_messages += 1;
                if self.frame_due.take().is_some() {
                    let _ = self.sock.set_read_timeout(self.timeout.filter(|t| !t.is_zero()));
                }
                return Ok(msg);
            }
            // A frame has begun: from now on it must be complete by its deadline.
            if self.frame_due.is_none()
                && self.pos < self.inbuf.len()
                && let Some(limit) = self.frame_deadline
            {
                self.frame_due = Some(Instant::now() + limit);
            }
            if self.eof {
                return Err(if self.pos < self.inbuf.len() {
                    NetError::Malformed("the connection closed inside a message".into())
                } else {
                    NetError::Closed
                });
            }
            self.fill()?;
        }
    }

    fn counters(&self) -> Counters {
        self.counters
    }

    fn set_timeout(&mut self, timeout: Option<Duration>) {
        self.timeout = timeout;
        let _ = self.sock.set_read_timeout(timeout.filter(|t| !t.is_zero()));
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        // Closing the channel lets the writer send what is queued, then close.
        self.writer.take();
        if let Some(h) = self.writer_thread.take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn pair(sim: Option<NetSim>) -> (Conn, Conn) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (Conn::plain(a, sim).unwrap(), Conn::plain(b, sim).unwrap())
    }

    #[test]
    fn large_messages_cross_both_ways_at_once() {
        let (mut a, mut b) = pair(None);
        let big: Vec<u8> = (0..20_000_000u32).map(|i| i as u8).collect();
        let t = std::thread::spawn({
            let big = big.clone();
            move || {
                let got = b.exchange(&big).unwrap();
                (got, b.counters())
            }
        });
        let got = a.exchange(&big).unwrap();
        let (got_b, cb) = t.join().unwrap();
        assert_eq!(got, big);
        assert_eq!(got_b, big);
        assert_eq!(cb.received_bytes, big.len() as u64);
    }

    #[test]
    fn empty_messages_and_closing_are_seen() {
        let (mut a, mut b) = pair(None);
        a.send(&[]).unwrap();
        assert_eq!(b.recv().unwrap(), Vec::<u8>::new());
        drop(a);
        assert!(matches!(b.recv(), Err(NetError::Closed)));
    }

    #[test]
    fn a_silent_peer_times_out_and_a_huge_frame_is_malformed() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut raw = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        let mut c = Conn::plain(s, None).unwrap();
        c.set_timeout(Some(Duration::from_millis(50)));
        assert!(matches!(c.recv(), Err(NetError::Timeout(_))));
        raw.write_all(&u64::MAX.to_le_bytes()).unwrap();
        assert!(matches!(c.recv(), Err(NetError::TooLarge(..))));
        let mut c2 = {
            let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
            let (b, _) = l.accept().unwrap();
            let mut a = a;
            a.write_all(&10u64.to_le_bytes()).unwrap();
            a.write_all(b"abc").unwrap();
            drop(a);
            Conn::plain(b, None).unwrap()
        };
        assert!(matches!(c2.recv(), Err(NetError::Malformed(_))));
    }

    #[test]
    fn frames_over_the_limit_a_slow_drip_and_a_closed_peer_are_seen() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut raw = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        let mut c = Conn::plain(s, None).unwrap();
        // A frame announced over the limit is refused before its body arrives.
        c.set_max_frame(100);
        raw.write_all(&101u64.to_le_bytes()).unwrap();
        assert!(matches!(c.recv(), Err(NetError::TooLarge(101, 100))));

        let mut raw = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        let mut c = Conn::plain(s, None).unwrap();
        assert!(!c.peer_gone());
        // A byte every 40 ms beats a 100 ms read timeout but not a 300 ms frame deadline.
        c.set_timeout(Some(Duration::from_millis(100)));
        c.set_frame_deadline(Some(Duration::from_millis(300)));
        let drip = std::thread::spawn(move || {
            raw.write_all(&100u64.to_le_bytes()).unwrap();
            for _ in 0..30 {
                std::thread::sleep(Duration::from_millis(40));
                if raw.write_all(&[0]).is_err() {
                    break;
                }
            }
            raw
        });
        let t = Instant::now();
        assert!(matches!(c.recv(), Err(NetError::Timeout(_))));
        assert!(t.elapsed() < Duration::from_millis(800), "{:?}", t.elapsed());
        drop(drip.join().unwrap());
        std::thread::sleep(Duration::from_millis(50));
        assert!(c.peer_gone());
    }
}
