//! TensorBoard event records written by hand (TFRecord framing, masked CRC32C, the Event and
//! Summary protobufs), for tests of the readers and of logs followed as they grow.

use crate::proto::{field_bytes, varint};

/// TFRecord's masked CRC32C.
fn masked_crc(data: &[u8]) -> u32 {
    crc32c::crc32c(data).rotate_right(15).wrapping_add(0xa282_ead8)
}

/// One TFRecord holding an Event with a scalar (`simple_value`, or a float tensor).
pub fn scalar(step: u64, tag: &str, value: f32, as_tensor: bool) -> Vec<u8> {
    let mut val = Vec::new();
    field_bytes(1, tag.as_bytes(), &mut val);
    if as_tensor {
        let mut tensor = Vec::new();
        varint(1 << 3, &mut tensor);
        varint(1, &mut tensor); // DT_FLOAT
        field_bytes(4, &value.to_le_bytes(), &mut tensor);
        field_bytes(8, &tensor, &mut val);
    } else {
        varint(2 << 3 | 5, &mut val);
        val.extend_from_slice(&value.to_le_bytes());
    }
    event(step, &val)
}

/// One TFRecord holding an Event with a text summary (`add_text`: a string tensor under the
/// text plugin).
pub fn text(step: u64, tag: &str, text: &str) -> Vec<u8> {
    let mut val = Vec::new();
    field_bytes(1, tag.as_bytes(), &mut val);
    let (mut plugin, mut meta) = (Vec::new(), Vec::new());
    field_bytes(1, b"text", &mut plugin);
    field_bytes(1, &plugin, &mut meta);
    field_bytes(9, &meta, &mut val);
    let mut tensor = Vec::new();
    varint(1 << 3, &mut tensor);
    varint(7, &mut tensor); // DT_STRING
    field_bytes(8, text.as_bytes(), &mut tensor);
    field_bytes(8, &tensor, &mut val);
    event(step, &val)
}

/// One TFRecord holding an Event whose summary holds the value `val` (a `Summary.Value`).
pub fn event(step: u64, val: &[u8]) -> Vec<u8> {
    let mut summary = Vec::new();
    field_bytes(1, val, &mut summary);
    let mut event = Vec::new();
    varint(1 << 3 | 1, &mut event);
    event.extend_from_slice(&1.7e9f64.to_le_bytes());
    varint(2 << 3, &mut event);
    varint(step, &mut event);
    field_bytes(5, &summary, &mut event);
    let mut rec = header(event.len() as u64).to_vec();
    rec.extend_from_slice(&event);
    rec.extend_from_slice(&masked_crc(&event).to_le_bytes());
    rec
}

/// `rec` with its length field set to `len` (and the length's checksum to match): a record
/// whose frame is valid but claims more bytes than follow it.
pub fn relength(rec: &[u8], len: u64) -> Vec<u8> {
    let mut out = rec.to_vec();
    out[..12].copy_from_slice(&header(len));
    out
}

/// A TFRecord's header: the payload's length and the length's masked checksum.
fn header(len: u64) -> [u8; 12] {
    let bytes = len.to_le_bytes();
    let mut h = [0u8; 12];
    h[..8].copy_from_slice(&bytes);
    h[8..].copy_from_slice(&masked_crc(&bytes).to_le_bytes());
    h
}
