//! A minimal protobuf wire-format reader (enough for TensorBoard's Event/Summary/Value).

/// A decoded field value.
#[derive(Clone, Copy, Debug)]
pub enum Wire<'a> {
    /// Wire type 0.
    Varint(u64),
    /// Wire type 1.
    Fixed64(u64),
    /// Wire type 2.
    Bytes(&'a [u8]),
    /// Wire type 5.
    Fixed32(u32),
}

/// Iterates over the fields of one message.
pub struct Fields<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Set when the message was malformed; iteration stops.
    pub error: bool,
}

impl<'a> Fields<'a> {
    /// Fields of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Fields {
            buf,
            pos: 0,
            error: false,
        }
    }
}

/// Reads a varint at `*pos`.
pub fn varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut out: u64 = 0;
    for shift in (0..70).step_by(7) {
        let b = *buf.get(*pos)?;
        *pos += 1;
        if shift < 64 {
            out |= u64::from(b & 0x7f) << shift;
        }
        if b & 0x80 == 0 {
            return Some(out);
        }
    }
    None
}

impl<'a> Iterator for Fields<'a> {
    type Item = (u32, Wire<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.error || self.pos >= self.buf.len() {
            return None;
        }
        let r = (|| {
            let key = varint(self.buf, &mut self.pos)?;
            let field = u32::try_from(key >> 3).ok()?;
            let w = match key & 7 {
                0 => Wire::Varint(varint(self.buf, &mut self.pos)?),
                1 => {
                    let b = self.buf.get(self.pos..self.pos.checked_add(8)?)?;
                    self.pos += 8;
                    Wire::Fixed64(u64::from_le_bytes(b.try_into().ok()?))
                }
                2 => {
                    let n = usize::try_from(varint(self.buf, &mut self.pos)?).ok()?;
                    let end = self.pos.checked_add(n)?;
                    let b = self.buf.get(self.pos..end)?;
                    self.pos = end;
                    Wire::Bytes(b)
                }
                5 => {
                    let b = self.buf.get(self.pos..self.pos.checked_add(4)?)?;
                    self.pos += 4;
                    Wire::Fixed32(u32::from_le_bytes(b.try_into().ok()?))
                }
                _ => return None,
            };
            Some((field, w))
        })();
        if r.is_none() {
            self.error = true;
        }
        r
    }
}
