//! The view both ICMP versions share: their first 8 bytes are laid out
//! alike (type, code, checksum, four type-specific bytes, echo identifier
//! and sequence there), so [`crate::icmp`] and [`crate::icmpv6`] make their
//! views from one definition. What differs stays in each module: which
//! types are errors (its `is_error`) and the checksum (ICMPv6 sums a
//! pseudo-header, ICMPv4 does not).

/// Defines the view `$name` over a module's `HEADER_LEN`, `field` table and
/// `is_error`, which must be in scope where it is used.
macro_rules! icmp_view {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name<T> {
            buf: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Wraps `buf`, checking that the 8-byte header is present.
            #[inline]
            pub fn new_checked(buf: T) -> $crate::Result<Self> {
                $crate::need(buf.as_ref(), HEADER_LEN)?;
                Ok($name { buf })
            }

            /// The wrapped buffer.
            #[inline]
            pub fn into_inner(self) -> T {
                self.buf
            }

            /// Message type.
            #[inline]
            pub fn msg_type(&self) -> u8 {
                self.buf.as_ref()[field::TYPE]
            }

            /// Message code.
            #[inline]
            pub fn code(&self) -> u8 {
                self.buf.as_ref()[field::CODE]
            }

            /// Checksum field.
            #[inline]
            pub fn checksum(&self) -> u16 {
                $crate::be16(self.buf.as_ref(), field::CHECKSUM.start)
            }

            /// The four type-specific bytes after the checksum.
            #[inline]
            pub fn rest_of_header(&self) -> [u8; 4] {
                $crate::array(self.buf.as_ref(), field::REST.start)
            }

            /// Identifier (echo request/reply).
            #[inline]
            pub fn echo_ident(&self) -> u16 {
                $crate::be16(self.buf.as_ref(), field::ECHO_IDENT.start)
            }

            /// Sequence number (echo request/reply).
            #[inline]
            pub fn echo_seq_no(&self) -> u16 {
                $crate::be16(self.buf.as_ref(), field::ECHO_SEQNO.start)
            }

            /// True if this is an error message quoting the offending packet.
            #[inline]
            pub fn is_error(&self) -> bool {
                is_error(self.msg_type())
            }

            /// Header length: always [`HEADER_LEN`].
            #[inline]
            pub const fn header_len(&self) -> usize {
                HEADER_LEN
            }
        }

        impl<'a, T: AsRef<[u8]> + ?Sized> $name<&'a T> {
            /// The bytes after the 8-byte header (for errors: the quoted
            /// packet).
            #[inline]
            pub fn payload(&self) -> &'a [u8] {
                $crate::tail(AsRef::<[u8]>::as_ref(self.buf), HEADER_LEN)
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $name<T> {
            /// Sets the message type.
            #[inline]
            pub fn set_msg_type(&mut self, v: u8) {
                self.buf.as_mut()[field::TYPE] = v;
            }

            /// Sets the code.
            #[inline]
            pub fn set_code(&mut self, v: u8) {
                self.buf.as_mut()[field::CODE] = v;
            }

            /// Sets the checksum field.
            #[inline]
            pub fn set_checksum(&mut self, v: u16) {
                $crate::put16(self.buf.as_mut(), field::CHECKSUM.start, v);
            }

            /// Sets the echo identifier.
            #[inline]
            pub fn set_echo_ident(&mut self, v: u16) {
                $crate::put16(self.buf.as_mut(), field::ECHO_IDENT.start, v);
            }

            /// Sets the echo sequence number.
            #[inline]
            pub fn set_echo_seq_no(&mut self, v: u16) {
                $crate::put16(self.buf.as_mut(), field::ECHO_SEQNO.start, v);
            }

            /// The bytes after the 8-byte header, writable.
            #[inline]
            pub fn payload_mut(&mut self) -> &mut [u8] {
                &mut self.buf.as_mut()[HEADER_LEN..]
            }
        }
    };
}

pub(crate) use icmp_view;
