//! Protobuf's wire format, written: what the hand-made TensorBoard and W&B records are built of.

/// `v` as a varint.
pub(crate) fn varint(mut v: u64, out: &mut Vec<u8>) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// A length-delimited field (wire type 2): bytes, a string, or a nested message.
pub(crate) fn field_bytes(field: u32, data: &[u8], out: &mut Vec<u8>) {
    varint(u64::from(field << 3 | 2), out);
    varint(data.len() as u64, out);
    out.extend_from_slice(data);
}

/// A varint field (wire type 0).
pub(crate) fn field_varint(field: u32, v: u64, out: &mut Vec<u8>) {
    varint(u64::from(field << 3), out);
    varint(v, out);
}
