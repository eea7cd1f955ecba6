//! Keys and values in the log and snapshots (JSON) as base64 text (standard alphabet, padded):
//! a third larger than the bytes, where a JSON array of numbers would be three to four times.

use base64::display::Base64Display;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use bytes::Bytes;
use serde::{Deserialize, Deserializer, Serializer};

/// Written straight into the serializer (serde_json encodes a chunk at a time on the stack), not
/// through a `String` of the whole text: a put's value is encoded for the leader's log, each
/// follower's message and each follower's log.
pub fn serialize<S: Serializer>(bytes: &Bytes, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&Base64Display::new(bytes, &STANDARD))
}

pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
    let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
    STANDARD
        .decode(text.as_bytes())
        .map(Bytes::from)
        .map_err(serde::de::Error::custom)
}

/// The same for an `Option<Bytes>` (absent when `None`, with `skip_serializing_if`).
pub mod option {
    use super::*;

    pub fn serialize<S: Serializer>(bytes: &Option<Bytes>, s: S) -> Result<S::Ok, S::Error> {
        match bytes {
            Some(bytes) => super::serialize(bytes, s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Bytes>, D::Error> {
        super::deserialize(d).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
    struct Value {
        #[serde(with = "super")]
        v: Bytes,
    }

    /// The text is what `STANDARD.encode` gives, quoted (the bytes of logs and snapshots written
    /// before it was streamed), at lengths around base64's 3-byte groups and its display
    /// chunks, and it decodes back.
    #[test]
    fn streamed_text_is_the_encoded_string_and_decodes_back() {
        for len in [0, 1, 2, 3, 4, 767, 768, 769, 1023, 1024, 1025, 3000, 70_000] {
            let bytes = Bytes::from((0..len).map(|i| (i * 7 % 256) as u8).collect::<Vec<u8>>());
            let json = serde_json::to_string(&Value { v: bytes.clone() }).unwrap();
            assert_eq!(json, format!("{{\"v\":\"{}\"}}", STANDARD.encode(&bytes)));
            let back: Value = serde_json::from_str(&json).unwrap();
            assert_eq!(back.v, bytes, "length {len}");
        }
    }
}
