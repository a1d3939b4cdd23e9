//! How a Rust field becomes a Parquet column: one trait, implemented for the handful of
//! types the tables use, so each table is declared once (its row struct) and its schema and
//! Arrow arrays follow from it.

use std::fmt::Write as _;
use std::net::IpAddr;
use std::sync::Arc;

use arrow_array::builder::StringBuilder;
use arrow_array::{ArrayRef, BooleanArray, Int16Array, Int32Array, Int64Array, Int8Array};
use arrow_schema::{DataType, Field};

/// A field type that knows its Arrow type and how to build a column from rows.
pub trait ColumnType: Sized {
    fn data_type() -> DataType;
    fn nullable() -> bool;
    fn array<'a>(values: impl Iterator<Item = &'a Self>) -> ArrayRef
    where
        Self: 'a;
    fn field(name: &str) -> Field {
        Field::new(name, Self::data_type(), Self::nullable())
    }
}

macro_rules! primitive {
    ($t:ty, $dt:expr, $array:ty) => {
        impl ColumnType for $t {
            fn data_type() -> DataType {
                $dt
            }
            fn nullable() -> bool {
                false
            }
            fn array<'a>(values: impl Iterator<Item = &'a Self>) -> ArrayRef {
                Arc::new(<$array>::from_iter_values(values.copied()))
            }
        }
        impl ColumnType for Option<$t> {
            fn data_type() -> DataType {
                $dt
            }
            fn nullable() -> bool {
                true
            }
            fn array<'a>(values: impl Iterator<Item = &'a Self>) -> ArrayRef {
                Arc::new(<$array>::from_iter(values.copied()))
            }
        }
    };
}

primitive!(i64, DataType::Int64, Int64Array);
primitive!(i32, DataType::Int32, Int32Array);
primitive!(i16, DataType::Int16, Int16Array);
primitive!(i8, DataType::Int8, Int8Array);

impl ColumnType for bool {
    fn data_type() -> DataType {
        DataType::Boolean
    }
    fn nullable() -> bool {
        false
    }
    fn array<'a>(values: impl Iterator<Item = &'a Self>) -> ArrayRef {
        Arc::new(BooleanArray::from_iter(values.map(|v| Some(*v))))
    }
}

impl ColumnType for Option<bool> {
    fn data_type() -> DataType {
        DataType::Boolean
    }
    fn nullable() -> bool {
        true
    }
    fn array<'a>(values: impl Iterator<Item = &'a Self>) -> ArrayRef {
        Arc::new(BooleanArray::from_iter(values.copied()))
    }
}

/// Text columns: anything that can write itself as a string. Rows keep compact values
/// (an address is 17 bytes, not a heap string) and are formatted only when a batch is built.
pub trait AsText {
    fn write_text(&self, out: &mut String);
}

impl AsText for String {
    fn write_text(&self, out: &mut String) {
        out.push_str(self);
    }
}

impl AsText for &'static str {
    fn write_text(&self, out: &mut String) {
        out.push_str(self);
    }
}

/// An IP address, written in its standard text form (RFC 5952 for IPv6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Addr(pub IpAddr);

impl AsText for Addr {
    fn write_text(&self, out: &mut String) {
        match self.0 {
            // Dotted quads by hand: `fmt` costs several times more, on every packet's
            // two addresses.
            IpAddr::V4(a) => {
                for (i, octet) in a.octets().into_iter().enumerate() {
                    if i > 0 {
                        out.push('.');
                    }
                    push_u8(out, octet);
                }
            }
            IpAddr::V6(_) => {
                let _ = write!(out, "{}", self.0);
            }
        }
    }
}

fn push_u8(out: &mut String, v: u8) {
    if v >= 100 {
        out.push((b'0' + v / 100) as char);
    }
    if v >= 10 {
        out.push((b'0' + v / 10 % 10) as char);
    }
    out.push((b'0' + v % 10) as char);
}

/// Opaque bytes (a file handle), written as lowercase hex.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Hex(pub Vec<u8>);

impl AsText for Hex {
    fn write_text(&self, out: &mut String) {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        out.reserve(self.0.len() * 2);
        for b in &self.0 {
            out.push(DIGITS[(b >> 4) as usize] as char);
            out.push(DIGITS[(b & 15) as usize] as char);
        }
    }
}

fn text_array<'a, T: AsText + 'a>(values: impl Iterator<Item = Option<&'a T>>) -> ArrayRef {
    // Sized up front (about an address's length per value) rather than by doublings.
    let n = values.size_hint().0;
    let mut b = StringBuilder::with_capacity(n, n * 12);
    let mut s = String::new();
    for v in values {
        match v {
            Some(v) => {
                s.clear();
                v.write_text(&mut s);
                b.append_value(&s);
            }
            None => b.append_null(),
        }
    }
    Arc::new(b.finish())
}

macro_rules! text {
    ($t:ty) => {
        impl ColumnType for $t {
            fn data_type() -> DataType {
                DataType::Utf8
            }
            fn nullable() -> bool {
                false
            }
            fn array<'a>(values: impl Iterator<Item = &'a Self>) -> ArrayRef {
                text_array(values.map(Some))
            }
        }
        impl ColumnType for Option<$t> {
            fn data_type() -> DataType {
                DataType::Utf8
            }
            fn nullable() -> bool {
                true
            }
            fn array<'a>(values: impl Iterator<Item = &'a Self>) -> ArrayRef {
                text_array(values.map(Option::as_ref))
            }
        }
    };
}

text!(String);
text!(&'static str);
text!(Addr);
text!(Hex);

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Array, StringArray};

    #[test]
    fn text_columns_format_at_build_time() {
        let v = [
            Some(Addr("198.18.0.1".parse().unwrap())),
            None,
            Some(Addr("2001:db8::1".parse().unwrap())),
        ];
        let a = <Option<Addr>>::array(v.iter());
        let a = a.as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!(a.value(0), "198.18.0.1");
        assert!(a.is_null(1));
        assert_eq!(a.value(2), "2001:db8::1");
        for a in ["0.0.0.0", "255.255.255.255", "10.1.100.9", "198.18.0.20"] {
            let mut s = String::new();
            Addr(a.parse().unwrap()).write_text(&mut s);
            assert_eq!(s, a);
        }
        let h = Hex(vec![0x00, 0xab, 0x10]);
        let a = <Hex>::array([h].iter());
        let a = a.as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!(a.value(0), "00ab10");
    }
}
