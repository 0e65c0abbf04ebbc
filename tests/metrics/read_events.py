#!/usr/bin/python3
"""Independent reader of a TensorBoard event file, for tests/metrics.

Parses the TFRecord framing by hand, checks both masked CRC-32Cs of every record with its own
CRC-32C, and decodes each record as TensorFlow's Event message, built here at run time from a
descriptor written out field by field (not from Merak's event.proto). Prints one line per record:

  version <TAB> <file_version> <TAB> <wall_time>
  scalar  <TAB> <step> <TAB> <float32 bits, 8 hex digits> <TAB> <wall_time> <TAB> <tag>
  start   <TAB> <step> <TAB> <wall_time>      (a SessionLog START: a resumed run's purge step)

Exit status 0 when the whole file is well formed, 1 (with the reason on stderr) otherwise.
"""

import struct
import sys

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

# ---- CRC-32C, bitwise table over the reflected Castagnoli polynomial ----

_POLY = 0x82F63B78
_TABLE = []
for _b in range(256):
    _r = _b
    for _ in range(8):
        _r = (_r >> 1) ^ _POLY if _r & 1 else _r >> 1
    _TABLE.append(_r)


def crc32c(data):
    r = 0xFFFFFFFF
    for byte in data:
        r = (r >> 8) ^ _TABLE[(r ^ byte) & 0xFF]
    return r ^ 0xFFFFFFFF


def masked(crc):
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


# The checker checks itself first.
assert crc32c(b"123456789") == 0xE3069283
assert crc32c(bytes(32)) == 0x8A9136AA

# ---- TensorFlow's Event / Summary, field numbers and types as in TensorFlow's protos ----

_F = descriptor_pb2.FieldDescriptorProto


def _field(msg, name, number, ftype, label=_F.LABEL_OPTIONAL, type_name=None, oneof=None):
    f = msg.field.add()
    f.name, f.number, f.type, f.label = name, number, ftype, label
    if type_name:
        f.type_name = type_name
    if oneof is not None:
        f.oneof_index = oneof


def _build_event_class():
    fdp = descriptor_pb2.FileDescriptorProto()
    fdp.name = "read_events_tf_event.proto"
    fdp.package = "tfcheck"
    fdp.syntax = "proto3"

    summary = fdp.message_type.add()
    summary.name = "Summary"
    value = summary.nested_type.add()
    value.name = "Value"
    value.oneof_decl.add().name = "value"
    _field(value, "node_name", 7, _F.TYPE_STRING)
    _field(value, "tag", 1, _F.TYPE_STRING)
    _field(value, "simple_value", 2, _F.TYPE_FLOAT, oneof=0)
    _field(value, "obsolete_old_style_histogram", 3, _F.TYPE_BYTES, oneof=0)
    _field(summary, "value", 1, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, ".tfcheck.Summary.Value")

    session_log = fdp.message_type.add()
    session_log.name = "SessionLog"
    status = session_log.enum_type.add()
    status.name = "SessionStatus"
    for name, number in (("STATUS_UNSPECIFIED", 0), ("START", 1), ("STOP", 2), ("CHECKPOINT", 3)):
        v = status.value.add()
        v.name, v.number = name, number
    _field(session_log, "status", 1, _F.TYPE_ENUM, type_name=".tfcheck.SessionLog.SessionStatus")
    _field(session_log, "checkpoint_path", 2, _F.TYPE_STRING)
    _field(session_log, "msg", 3, _F.TYPE_STRING)

    event = fdp.message_type.add()
    event.name = "Event"
    event.oneof_decl.add().name = "what"
    _field(event, "wall_time", 1, _F.TYPE_DOUBLE)
    _field(event, "step", 2, _F.TYPE_INT64)
    _field(event, "file_version", 3, _F.TYPE_STRING, oneof=0)
    _field(event, "graph_def", 4, _F.TYPE_BYTES, oneof=0)
    _field(event, "summary", 5, _F.TYPE_MESSAGE, type_name=".tfcheck.Summary", oneof=0)
    # 6 is the deprecated log_message, which TensorBoard ignores: declared so that a record
    # using it is named (and refused), not taken for a session log.
    _field(event, "log_message", 6, _F.TYPE_BYTES, oneof=0)
    _field(event, "session_log", 7, _F.TYPE_MESSAGE, type_name=".tfcheck.SessionLog", oneof=0)
    _field(event, "meta_graph_def", 9, _F.TYPE_BYTES, oneof=0)

    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    desc = pool.FindMessageTypeByName("tfcheck.Event")
    if hasattr(message_factory, "GetMessageClass"):  # protobuf >= 4.22
        return message_factory.GetMessageClass(desc)
    return message_factory.MessageFactory(pool).GetPrototype(desc)


Event = _build_event_class()


class Bad(Exception):
    pass


def records(blob):
    """Yields (offset, payload) for each record, checking the framing and both CRCs."""
    pos = 0
    while pos < len(blob):
        if len(blob) - pos < 12:
            raise Bad("offset %d: truncated record header (%d bytes left)" % (pos, len(blob) - pos))
        header = blob[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", blob[pos + 8:pos + 12])
        if length_crc != masked(crc32c(header)):
            raise Bad("offset %d: length CRC mismatch" % pos)
        start = pos + 12
        if len(blob) - start < length + 4:
            raise Bad("offset %d: truncated record data (length %d)" % (pos, length))
        data = blob[start:start + length]
        (data_crc,) = struct.unpack("<I", blob[start + length:start + length + 4])
        if data_crc != masked(crc32c(data)):
            raise Bad("offset %d: data CRC mismatch" % pos)
        yield pos, data
        pos = start + length + 4


def check(path):
    with open(path, "rb") as f:
        blob = f.read()
    if not blob:
        raise Bad("empty file")
    out = []
    for index, (offset, data) in enumerate(records(blob)):
        event = Event()
        try:
            event.ParseFromString(data)
        except Exception as e:  # DecodeError and friends
            raise Bad("record %d at offset %d: not an Event: %s" % (index, offset, e))
        what = event.WhichOneof("what")
        if index == 0:
            if what != "file_version" or event.file_version != "brain.Event:2":
                raise Bad("first record is not file_version brain.Event:2: %r" % event)
            if not event.wall_time > 0:
                raise Bad("first record has no wall_time")
            out.append("version\t%s\t%r" % (event.file_version, event.wall_time))
            continue
        if not event.wall_time > 0:
            raise Bad("record %d: no wall_time" % index)
        if what == "session_log":
            if event.session_log.status != 1:  # START
                raise Bad("record %d: session_log status %d, not START" %
                          (index, event.session_log.status))
            out.append("start\t%d\t%r" % (event.step, event.wall_time))
            continue
        if what != "summary":
            raise Bad("record %d: expected a summary, found %s" % (index, what))
        if len(event.summary.value) == 0:
            raise Bad("record %d: empty summary" % index)
        for v in event.summary.value:
            if v.WhichOneof("value") != "simple_value":
                raise Bad("record %d: tag %r has no simple_value" % (index, v.tag))
            if not v.tag or "\t" in v.tag or "\n" in v.tag:
                raise Bad("record %d: bad tag %r" % (index, v.tag))
            bits = struct.unpack("<I", struct.pack("<f", v.simple_value))[0]
            out.append("scalar\t%d\t%08x\t%r\t%s" % (event.step, bits, event.wall_time, v.tag))
    return out


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: read_events.py EVENT_FILE\n")
        return 2
    try:
        lines = check(argv[1])
    except Bad as e:
        sys.stderr.write("read_events: %s: %s\n" % (argv[1], e))
        return 1
    # UTF-8 whatever the locale, since tags may hold any text.
    sys.stdout.buffer.write("".join(line + "\n" for line in lines).encode("utf-8"))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
