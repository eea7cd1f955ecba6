//! Keys and values in the log and snapshots (JSON) as base64 text (standard alphabet, padded):
//! a third larger than the bytes, where a JSON array of numbers would be three to four times.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use bytes::Bytes;
use serde::{Deserialize, Deserializer, Serializer};

pub fn serialize<S: Serializer>(bytes: &Bytes, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&STANDARD.encode(bytes))
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
