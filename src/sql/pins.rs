//! Placeholder until the classifier lands: pins everything but plain reads and writes.

/// What a statement leaves on its server connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pin {
    Schema,
    MultiStatement,
    Unknown,
}

impl Pin {
    pub fn as_str(self) -> &'static str {
        "unknown"
    }
}

pub fn pins(text: &[u8]) -> Option<Pin> {
    use super::Statement;
    if text.contains(&b'@') || text.contains(&b';') {
        return Some(Pin::Unknown);
    }
    match super::classify(text) {
        Statement::Select
        | Statement::Insert
        | Statement::Update
        | Statement::Delete
        | Statement::Replace
        | Statement::Begin
        | Statement::Commit
        | Statement::Rollback
        | Statement::Show => None,
        _ => Some(Pin::Unknown),
    }
}
