//! Two metadata fields held in less memory than their plain types would take, with the same JSON:
//! `StringMap` (labels, annotations) takes one pointer while empty, and `Uid` keeps steward's
//! UUID-shaped uids as their 16 bytes. Every stored object carries both; at a hundred thousand
//! objects per node they are what decides whether an object's allocation lands in the next
//! size class up (`examples/object_memory.rs` measures it).

use std::collections::BTreeMap;
use std::fmt;
use std::ops::{Deref, DerefMut};

use compact_str::CompactString;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Labels or annotations: a string-to-string map that is a null pointer while empty (most
/// objects' annotations, many objects' labels). Reads through `Deref` to the map; a write
/// through `DerefMut` allocates it. Serialized as the map.
// The box is the point: a `BTreeMap` is three words even when empty, the `Option<Box<_>>` one.
#[allow(clippy::box_collection)]
#[derive(Clone, Default)]
pub struct StringMap(Option<Box<BTreeMap<String, String>>>);

static EMPTY: BTreeMap<String, String> = BTreeMap::new();

impl StringMap {
    pub fn is_empty(&self) -> bool {
        self.0.as_ref().is_none_or(|map| map.is_empty())
    }
}

impl Deref for StringMap {
    type Target = BTreeMap<String, String>;

    fn deref(&self) -> &BTreeMap<String, String> {
        self.0.as_deref().unwrap_or(&EMPTY)
    }
}

impl DerefMut for StringMap {
    fn deref_mut(&mut self) -> &mut BTreeMap<String, String> {
        self.0.get_or_insert_with(Box::default)
    }
}

impl From<BTreeMap<String, String>> for StringMap {
    fn from(map: BTreeMap<String, String>) -> StringMap {
        StringMap((!map.is_empty()).then(|| Box::new(map)))
    }
}

impl From<StringMap> for BTreeMap<String, String> {
    fn from(map: StringMap) -> BTreeMap<String, String> {
        map.0.map(|map| *map).unwrap_or_default()
    }
}

impl FromIterator<(String, String)> for StringMap {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(pairs: I) -> StringMap {
        StringMap::from(pairs.into_iter().collect::<BTreeMap<_, _>>())
    }
}

impl<'a> IntoIterator for &'a StringMap {
    type Item = (&'a String, &'a String);
    type IntoIter = std::collections::btree_map::Iter<'a, String, String>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// Equal as maps: an emptied map equals one never written.
impl PartialEq for StringMap {
    fn eq(&self, other: &StringMap) -> bool {
        **self == **other
    }
}

impl Eq for StringMap {}

impl fmt::Debug for StringMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}

impl Serialize for StringMap {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(s)
    }
}

impl<'de> Deserialize<'de> for StringMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<StringMap, D::Error> {
        BTreeMap::deserialize(d).map(StringMap::from)
    }
}

/// Characters in a UUID's text: 32 hex digits and 4 dashes.
const UUID_CHARS: usize = 36;

/// Where the dashes of a UUID's text are.
const DASHES: [usize; 4] = [8, 13, 18, 23];

/// An object's uid. Those steward gives (`objects::apply::uid`) are UUID-shaped (lower-case hex,
/// 8-4-4-4-12) and kept as their 16 bytes; any other text (a uid a client sent, which apply
/// replaces; an empty one) is kept as text. The text is the same either way: packing is only
/// done where unpacking gives back the very same string, so two uids are equal exactly when
/// their texts are.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Uid(Repr);

#[derive(Clone, PartialEq, Eq, Hash)]
enum Repr {
    Text(CompactString),
    Packed([u8; 16]),
}

impl Default for Repr {
    fn default() -> Repr {
        Repr::Text(CompactString::default())
    }
}

impl Uid {
    /// The uid whose text is these 16 bytes in lower-case hex, 8-4-4-4-12.
    pub fn from_bytes(bytes: [u8; 16]) -> Uid {
        Uid(Repr::Packed(bytes))
    }

    pub fn is_empty(&self) -> bool {
        matches!(&self.0, Repr::Text(t) if t.is_empty())
    }

    /// Length of the text, in bytes.
    pub fn len(&self) -> usize {
        match &self.0 {
            Repr::Text(t) => t.len(),
            Repr::Packed(_) => UUID_CHARS,
        }
    }

    /// The text, written into `buf` when packed.
    pub fn as_str<'a>(&'a self, buf: &'a mut [u8; UUID_CHARS]) -> &'a str {
        match &self.0 {
            Repr::Text(t) => t.as_str(),
            Repr::Packed(bytes) => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                let mut at = 0;
                for (i, b) in bytes.iter().enumerate() {
                    if matches!(i, 4 | 6 | 8 | 10) {
                        buf[at] = b'-';
                        at += 1;
                    }
                    buf[at] = HEX[usize::from(b >> 4)];
                    buf[at + 1] = HEX[usize::from(b & 0xf)];
                    at += 2;
                }
                // Only ASCII hex digits and dashes were written.
                std::str::from_utf8(&buf[..]).unwrap_or_default()
            }
        }
    }

    /// The 16 bytes of `text` if it is a UUID in lower-case hex, 8-4-4-4-12.
    fn pack(text: &str) -> Option<[u8; 16]> {
        let t = text.as_bytes();
        if t.len() != UUID_CHARS || DASHES.iter().any(|&i| t[i] != b'-') {
            return None;
        }
        let mut digits = t
            .iter()
            .enumerate()
            .filter(|(i, _)| !DASHES.contains(i))
            .map(|(_, &c)| match c {
                b'0'..=b'9' => Some(c - b'0'),
                b'a'..=b'f' => Some(c - b'a' + 10),
                _ => None,
            });
        let mut bytes = [0u8; 16];
        for byte in &mut bytes {
            *byte = (digits.next()?? << 4) | digits.next()??;
        }
        Some(bytes)
    }
}

impl From<&str> for Uid {
    fn from(text: &str) -> Uid {
        match Uid::pack(text) {
            Some(bytes) => Uid::from_bytes(bytes),
            None => Uid(Repr::Text(text.into())),
        }
    }
}

impl From<CompactString> for Uid {
    fn from(text: CompactString) -> Uid {
        match Uid::pack(&text) {
            Some(bytes) => Uid::from_bytes(bytes),
            None => Uid(Repr::Text(text)),
        }
    }
}

impl PartialEq<str> for Uid {
    fn eq(&self, other: &str) -> bool {
        self.as_str(&mut [0; UUID_CHARS]) == other
    }
}

impl PartialEq<&str> for Uid {
    fn eq(&self, other: &&str) -> bool {
        *self == **other
    }
}

impl PartialEq<String> for Uid {
    fn eq(&self, other: &String) -> bool {
        *self == **other
    }
}

impl PartialEq<Uid> for String {
    fn eq(&self, other: &Uid) -> bool {
        *other == **self
    }
}

impl fmt::Display for Uid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str(&mut [0; UUID_CHARS]))
    }
}

impl fmt::Debug for Uid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(&mut [0; UUID_CHARS]), f)
    }
}

impl Serialize for Uid {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str(&mut [0; UUID_CHARS]))
    }
}

impl<'de> Deserialize<'de> for Uid {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Uid, D::Error> {
        CompactString::deserialize(d).map(Uid::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uids_keep_their_text_packed_or_not() {
        let cases = [
            ("0000002a-0002-0000-0000-000000000007", true),
            ("ffffffff-ffff-ffff-ffff-ffffffffffff", true),
            // Not packed: upper case, no dashes, a dash out of place, too short, not hex, text.
            ("0000002A-0002-0000-0000-000000000007", false),
            ("0000002a000200000000000000000007", false),
            ("0000002a-00020-000-0000-000000000007", false),
            ("0000002a-0002-0000-0000-00000000007", false),
            ("0000002g-0002-0000-0000-000000000007", false),
            ("client-uid", false),
            ("", false),
        ];
        for (text, packed) in cases {
            let uid = Uid::from(text);
            assert_eq!(matches!(uid.0, Repr::Packed(_)), packed, "{text}");
            assert_eq!(uid.to_string(), text);
            assert_eq!(uid.len(), text.len());
            assert_eq!(uid.is_empty(), text.is_empty());
            assert!(uid == text);
            assert_eq!(format!("{uid:?}"), format!("{text:?}"));
            let json = serde_json::to_string(&uid).unwrap();
            assert_eq!(json, serde_json::to_string(text).unwrap());
            assert_eq!(serde_json::from_str::<Uid>(&json).unwrap(), uid);
            assert_eq!(Uid::from(CompactString::from(text)), uid);
        }
        assert_ne!(
            Uid::from("0000002a-0002-0000-0000-000000000007"),
            Uid::from("0000002a-0002-0000-0000-000000000008")
        );
        // As small as the text it replaces, and never on the heap when packed.
        assert_eq!(
            std::mem::size_of::<Uid>(),
            std::mem::size_of::<CompactString>()
        );
    }

    /// An `Arc<Resource>` (two counts and the object) fits jemalloc's 256-byte size class; one
    /// field more and every stored object takes the 320-byte class (`examples/object_memory.rs`).
    #[test]
    fn a_stored_object_fits_the_256_byte_size_class() {
        let counts = 2 * std::mem::size_of::<usize>();
        let inner = counts + std::mem::size_of::<crate::objects::resource::Resource>();
        assert!(inner <= 256, "ArcInner<Resource> is {inner} bytes");
    }

    #[test]
    fn string_maps_read_and_write_as_maps() {
        let mut labels = StringMap::default();
        assert!(labels.is_empty() && labels.0.is_none());
        assert_eq!(serde_json::to_string(&labels).unwrap(), "{}");
        labels.insert("app".into(), "web".into());
        assert_eq!(labels.get("app").map(String::as_str), Some("web"));
        let json = serde_json::to_string(&labels).unwrap();
        assert_eq!(json, r#"{"app":"web"}"#);
        assert_eq!(serde_json::from_str::<StringMap>(&json).unwrap(), labels);
        labels.remove("app");
        assert_eq!(labels, StringMap::default());
        assert!(StringMap::from(BTreeMap::new()).0.is_none());
        assert_eq!(format!("{labels:?}"), "{}");
    }
}
