//! RFC 5655 IPFIX files: nothing but IPFIX messages, one after another, each found by its
//! header's length field.

use std::io::{self, Read, Write};

use crate::wire::{u16_at, HEADER_LEN, VERSION};
use crate::Error;

/// Appends one message to a file. The message must be a whole message (its length field
/// equal to its length), or readers would lose their place in the file.
pub fn write_message<W: Write>(w: &mut W, message: &[u8]) -> io::Result<()> {
    if message.len() < HEADER_LEN
        || u16_at(message, 0) != VERSION
        || u16_at(message, 2) as usize != message.len()
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not one whole IPFIX message",
        ));
    }
    w.write_all(message)
}

/// Messages of a file held in memory, in order. Stops after the first error.
pub fn messages(file: &[u8]) -> Messages<'_> {
    Messages {
        rest: file,
        at: 0,
        failed: false,
    }
}

pub struct Messages<'a> {
    rest: &'a [u8],
    at: usize,
    failed: bool,
}

impl<'a> Iterator for Messages<'a> {
    /// A message, or where the file stops making sense (offsets count from the file's start).
    type Item = Result<&'a [u8], Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() || self.failed {
            return None;
        }
        match message_len(self.rest) {
            Ok(len) if len <= self.rest.len() => {
                let (m, rest) = self.rest.split_at(len);
                self.rest = rest;
                self.at += len;
                Some(Ok(m))
            }
            Ok(_) => {
                self.failed = true;
                Some(Err(Error::Truncated {
                    what: "message at the end of the file",
                    at: self.at,
                }))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e.offset_by(self.at)))
            }
        }
    }
}

/// The length of the message starting `b` (at least its header must be there).
fn message_len(b: &[u8]) -> Result<usize, Error> {
    if b.len() < HEADER_LEN {
        return Err(Error::Truncated {
            what: "message header",
            at: 0,
        });
    }
    if u16_at(b, 0) != VERSION {
        return Err(Error::Invalid {
            what: "version (not 10)",
            at: 0,
        });
    }
    let len = u16_at(b, 2) as usize;
    if len < HEADER_LEN {
        return Err(Error::Invalid {
            what: "message length below 16",
            at: 2,
        });
    }
    Ok(len)
}

/// Reads messages from a stream (a file, a pipe) into one reused buffer.
pub struct FileReader<R> {
    inner: R,
    buf: Vec<u8>,
    at: u64,
}

/// What went wrong reading a file.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error(transparent)]
    Io(#[from] io::Error),
    #[error("message at file offset {at}: {error}")]
    Format { at: u64, error: Error },
}

impl<R: Read> FileReader<R> {
    pub fn new(inner: R) -> Self {
        FileReader {
            inner,
            buf: Vec::with_capacity(65535),
            at: 0,
        }
    }

    /// File offset of the next message.
    pub fn offset(&self) -> u64 {
        self.at
    }

    /// The next message, None at a clean end of file.
    pub fn next_message(&mut self) -> Result<Option<&[u8]>, FileError> {
        self.buf.resize(HEADER_LEN, 0);
        let got = read_full(&mut self.inner, &mut self.buf)?;
        if got == 0 {
            return Ok(None);
        }
        let format = |error| FileError::Format { at: self.at, error };
        if got < HEADER_LEN {
            return Err(format(Error::Truncated {
                what: "message header",
                at: got,
            }));
        }
        let len = message_len(&self.buf).map_err(format)?;
        self.buf.resize(len, 0);
        let got = read_full(&mut self.inner, &mut self.buf[HEADER_LEN..])?;
        if got < len - HEADER_LEN {
            return Err(format(Error::Truncated {
                what: "message",
                at: HEADER_LEN + got,
            }));
        }
        self.at += len as u64;
        Ok(Some(&self.buf))
    }
}

fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MessageBuilder, MessageHeader, PacketReport};

    fn file_of(n: usize) -> (Vec<u8>, Vec<Vec<u8>>) {
        let mut file = Vec::new();
        let mut msgs = Vec::new();
        for i in 0..n {
            let mut buf = [0u8; 600];
            let header = MessageHeader {
                sequence: i as u32,
                domain: 1,
                ..Default::default()
            };
            let mut b = MessageBuilder::new(&mut buf, 600, header).unwrap();
            if i == 0 {
                b.add_templates().unwrap();
            }
            let f = vec![i as u8; i * 40];
            b.add_packet_report(&PacketReport {
                time_ns: 1,
                interface: 0,
                selector: 0,
                frame_size: 1,
                frame_section: &f,
            })
            .unwrap();
            let len = b.finish().len;
            write_message(&mut file, &buf[..len]).unwrap();
            msgs.push(buf[..len].to_vec());
        }
        (file, msgs)
    }

    #[test]
    fn round_trip_slice_and_stream() {
        let (file, msgs) = file_of(12);
        let back: Vec<&[u8]> = messages(&file).map(|m| m.unwrap()).collect();
        assert_eq!(back, msgs.iter().map(|m| &m[..]).collect::<Vec<_>>());
        let mut r = FileReader::new(&file[..]);
        for m in &msgs {
            assert_eq!(r.next_message().unwrap(), Some(&m[..]));
        }
        assert!(r.next_message().unwrap().is_none());
        assert_eq!(r.offset(), file.len() as u64);
        assert!(write_message(&mut Vec::new(), &msgs[0][..20]).is_err());
    }

    #[test]
    fn truncated_files_say_where() {
        let (file, msgs) = file_of(3);
        let first = msgs[0].len();
        for cut in 1..file.len() {
            let items: Vec<_> = messages(&file[..cut]).collect();
            let whole = items.iter().filter(|m| m.is_ok()).count();
            let at_boundary = [0, first, first + msgs[1].len()].contains(&cut);
            assert_eq!(items.len() - whole, usize::from(!at_boundary), "cut {cut}");
            let mut r = FileReader::new(&file[..cut]);
            let mut n = 0;
            loop {
                match r.next_message() {
                    Ok(Some(_)) => n += 1,
                    Ok(None) => {
                        assert!(at_boundary);
                        break;
                    }
                    Err(e) => {
                        assert!(!at_boundary);
                        assert!(
                            e.to_string().contains(&format!("offset {}", r.offset())),
                            "{e}"
                        );
                        break;
                    }
                }
            }
            assert_eq!(n, whole);
        }
        let mut bad = file.clone();
        bad[first + 1] = 9;
        let items: Vec<_> = messages(&bad).collect();
        assert_eq!(items.len(), 2);
        assert_eq!(
            items[1],
            Err(Error::Invalid {
                what: "version (not 10)",
                at: first
            })
        );
    }
}
