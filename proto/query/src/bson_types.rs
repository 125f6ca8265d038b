//! MongoDB's BSON types: the alias `$type` reports and takes, the number it takes, and the
//! element type that stands for each in a document. Every place that names or numbers a
//! type looks it up here; what each of them accepts (`$type`'s extra "number", the
//! targets of `$convert`) it decides itself.

use bson::spec::ElementType;
use bson::Bson;

/// One BSON type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BsonType {
    /// The name `$type` reports and takes, e.g. "objectId".
    pub alias: &'static str,
    /// The number `$type` takes: the element's type byte, read as signed (minKey is -1).
    pub number: i32,
    pub element: ElementType,
}

const fn bson_type(alias: &'static str, number: i32, element: ElementType) -> BsonType {
    BsonType {
        alias,
        number,
        element,
    }
}

/// Every BSON type, by number.
pub const BSON_TYPES: [BsonType; 21] = [
    bson_type("double", 1, ElementType::Double),
    bson_type("string", 2, ElementType::String),
    bson_type("object", 3, ElementType::EmbeddedDocument),
    bson_type("array", 4, ElementType::Array),
    bson_type("binData", 5, ElementType::Binary),
    bson_type("undefined", 6, ElementType::Undefined),
    bson_type("objectId", 7, ElementType::ObjectId),
    bson_type("bool", 8, ElementType::Boolean),
    bson_type("date", 9, ElementType::DateTime),
    bson_type("null", 10, ElementType::Null),
    bson_type("regex", 11, ElementType::RegularExpression),
    bson_type("dbPointer", 12, ElementType::DbPointer),
    bson_type("javascript", 13, ElementType::JavaScriptCode),
    bson_type("symbol", 14, ElementType::Symbol),
    bson_type(
        "javascriptWithScope",
        15,
        ElementType::JavaScriptCodeWithScope,
    ),
    bson_type("int", 16, ElementType::Int32),
    bson_type("timestamp", 17, ElementType::Timestamp),
    bson_type("long", 18, ElementType::Int64),
    bson_type("decimal", 19, ElementType::Decimal128),
    bson_type("minKey", -1, ElementType::MinKey),
    bson_type("maxKey", 127, ElementType::MaxKey),
];

/// The type an alias names ("number" is none: it stands for four types).
pub fn by_alias(alias: &str) -> Option<BsonType> {
    BSON_TYPES.into_iter().find(|t| t.alias == alias)
}

/// The type a number names.
pub fn by_number(number: i64) -> Option<BsonType> {
    BSON_TYPES
        .into_iter()
        .find(|t| i64::from(t.number) == number)
}

/// The type of an element type; the table has them all.
pub fn by_element(element: ElementType) -> BsonType {
    BSON_TYPES
        .into_iter()
        .find(|t| t.element == element)
        .expect("every element type is in the table")
}

/// The type of a value.
pub fn of(v: &Bson) -> BsonType {
    by_element(v.element_type())
}

/// MongoDB's name for the type of a value, as `$type` reports it.
pub fn type_name(v: &Bson) -> &'static str {
    of(v).alias
}

#[cfg(test)]
mod tests {
    use bson::{bson, Bson};

    use super::*;

    #[test]
    fn numbers_are_type_bytes_read_as_signed() {
        for t in BSON_TYPES {
            assert_eq!(t.number, i32::from(t.element as u8 as i8), "{}", t.alias);
            assert_eq!(ElementType::from(t.element as u8), Some(t.element));
        }
    }

    #[test]
    fn lookups_agree() {
        for t in BSON_TYPES {
            assert_eq!(by_alias(t.alias), Some(t));
            assert_eq!(by_number(i64::from(t.number)), Some(t));
            assert_eq!(by_element(t.element), t);
        }
        assert_eq!(by_alias("number"), None);
        assert_eq!(by_alias("Double"), None);
        for n in [0, 20, 126, 128, 255, -2] {
            assert_eq!(by_number(n), None, "{n}");
        }
    }

    #[test]
    fn of_values() {
        assert_eq!(type_name(&bson!(1)), "int");
        assert_eq!(type_name(&bson!(1i64)), "long");
        assert_eq!(type_name(&bson!({})), "object");
        assert_eq!(of(&Bson::MaxKey).number, 127);
        assert_eq!(of(&Bson::MinKey).number, -1);
        assert_eq!(of(&Bson::Undefined).alias, "undefined");
    }
}
