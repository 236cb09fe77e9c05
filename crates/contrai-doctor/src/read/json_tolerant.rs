//! JSON with Python's bare `NaN`, `Infinity` and `-Infinity` tokens.

use serde_json::Value;

/// Rewrites bare `NaN` / `Infinity` / `-Infinity` tokens (outside strings) as strings that
/// [`value_f64`] understands, keeping line numbers intact.
pub fn sanitize(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains("NaN") && !text.contains("Infinity") {
        return std::borrow::Cow::Borrowed(text);
    }
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len() + 16);
    let mut i = 0;
    let mut in_str = false;
    let mut last = 0;
    while i < b.len() {
        let c = b[i];
        if in_str {
            if c == b'\\' {
                i += 2;
                continue;
            }
            if c == b'"' {
                in_str = false;
            }
            i += 1;
            continue;
        }
        if c == b'"' {
            in_str = true;
            i += 1;
            continue;
        }
        let mut replaced = false;
        for tok in ["-Infinity", "Infinity", "NaN"] {
            if b[i..].starts_with(tok.as_bytes()) {
                out.push_str(&text[last..i]);
                out.push('"');
                out.push_str(tok);
                out.push('"');
                i += tok.len();
                last = i;
                replaced = true;
                break;
            }
        }
        if !replaced {
            i += 1;
        }
    }
    out.push_str(&text[last..]);
    std::borrow::Cow::Owned(out)
}

/// Parses tolerant JSON (see [`sanitize`]).
pub fn parse_tolerant(text: &str) -> Result<Value, serde_json::Error> {
    serde_json::from_str(&sanitize(text))
}

/// A JSON value as a float: numbers and the NaN/Infinity strings.
pub fn value_f64(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => match s.as_str() {
            "NaN" | "nan" => Some(f64::NAN),
            "Infinity" | "inf" => Some(f64::INFINITY),
            "-Infinity" | "-inf" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_tokens() {
        let v = parse_tolerant(r#"{"a": NaN, "b": -Infinity, "c": "NaN in text", "d": [Infinity]}"#)
            .unwrap_or(Value::Null);
        assert!(value_f64(&v["a"]).is_some_and(f64::is_nan));
        assert_eq!(value_f64(&v["b"]), Some(f64::NEG_INFINITY));
        assert_eq!(v["c"], Value::String("NaN in text".into()));
        assert_eq!(value_f64(&v["d"][0]), Some(f64::INFINITY));
    }
}
