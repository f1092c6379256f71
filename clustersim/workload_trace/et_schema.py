"""The protobuf schema of Chakra execution traces (``.et`` files), built in Python.

It follows Chakra's ``schema/protobuf/et_def.proto`` (package ``ChakraProtoMsg``, proto3)
as of Chakra 1.0.0, commit ``21585d8f2d65603d791d2121e3d4632351120262`` of
github.com/mlcommons/chakra (May 2026; the message layout has been unchanged there since
v0.0.4, May 2024).  It is written here from the field names and numbers, and built
as a ``FileDescriptorProto`` in a private descriptor pool, so no ``protoc`` runs at install
and Chakra's own generated module, if imported too, does not clash with it.  The layout::

    message AttributeProto {
      string name = 1;  string doc_string = 2;
      oneof value {            // T in the order below: T_val = 3 + 2 i, T_list = 4 + 2 i
        double double_val = 3;   DoubleList double_list = 4;
        float float_val = 5;     FloatList float_list = 6;
        int32 int32_val = 7;     Int32List int32_list = 8;
        int64 int64_val = 9;     Int64List int64_list = 10;
        uint32 uint32_val = 11;  Uint32List uint32_list = 12;
        uint64 uint64_val = 13;  Uint64List uint64_list = 14;
        sint32 sint32_val = 15;  Sint32List sint32_list = 16;
        sint64 sint64_val = 17;  Sint64List sint64_list = 18;
        fixed32 fixed32_val = 19;   Fixed32List fixed32_list = 20;
        fixed64 fixed64_val = 21;   Fixed64List fixed64_list = 22;
        sfixed32 sfixed32_val = 23; Sfixed32List sfixed32_list = 24;
        sfixed64 sfixed64_val = 25; Sfixed64List sfixed64_list = 26;
        bool bool_val = 27;      BoolList bool_list = 28;
        string string_val = 29;  StringList string_list = 30;
        bytes bytes_val = 31;    BytesList bytes_list = 32;
      }
    }
    message <T>List { repeated T values = 1; }       // one per type above
    message GlobalMetadata { string version = 1; repeated AttributeProto attr = 2; }
    enum NodeType { INVALID_NODE = 0; METADATA_NODE = 1; MEM_LOAD_NODE = 2;
                    MEM_STORE_NODE = 3; COMP_NODE = 4; COMM_SEND_NODE = 5;
                    COMM_RECV_NODE = 6; COMM_COLL_NODE = 7; }
    enum CollectiveCommType { ALL_REDUCE = 0; REDUCE = 1; ALL_GATHER = 2; GATHER = 3;
                    SCATTER = 4; BROADCAST = 5; ALL_TO_ALL = 6; REDUCE_SCATTER = 7;
                    REDUCE_SCATTER_BLOCK = 8; BARRIER = 9; }
    message Node {
      uint64 id = 1;  string name = 2;  NodeType type = 3;
      repeated uint64 ctrl_deps = 4;  repeated uint64 data_deps = 5;
      uint64 start_time_micros = 6;  uint64 duration_micros = 7;
      IOInfo inputs = 8;  IOInfo outputs = 9;  repeated AttributeProto attr = 10;
    }
    message IOInfo { string values = 1; string shapes = 2; string types = 3; }
    message Tensor { uint64 tensor_id = 1; uint64 storage_id = 2; uint64 offset = 3;
                     uint64 num_elem = 4; uint64 elem_bytes = 5; string device = 6; }

The enums' numbers are the ones :mod:`clustersim.workload_trace.chakra` names
(``NODE_TYPES``, ``COMM_TYPES``); ``comm_type`` is written as an ``int64_val`` attribute
(Chakra's converters do so), so ``CollectiveCommType`` is given for completeness.

Importing this module imports ``google.protobuf``; :mod:`clustersim.workload_trace` imports
it only when it reads an ``.et`` file.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from .chakra import BARRIER, BARRIER_NAME, COMM_TYPES, NODE_TYPES

PACKAGE = "ChakraProtoMsg"
"""Chakra's protobuf package."""

CHAKRA_VERSION = "1.0.0"
CHAKRA_COMMIT = "21585d8f2d65603d791d2121e3d4632351120262"
"""The Chakra release and commit whose ``et_def.proto`` this schema follows."""

_F = descriptor_pb2.FieldDescriptorProto

ATTRIBUTE_TYPES = (
    ("double", _F.TYPE_DOUBLE),
    ("float", _F.TYPE_FLOAT),
    ("int32", _F.TYPE_INT32),
    ("int64", _F.TYPE_INT64),
    ("uint32", _F.TYPE_UINT32),
    ("uint64", _F.TYPE_UINT64),
    ("sint32", _F.TYPE_SINT32),
    ("sint64", _F.TYPE_SINT64),
    ("fixed32", _F.TYPE_FIXED32),
    ("fixed64", _F.TYPE_FIXED64),
    ("sfixed32", _F.TYPE_SFIXED32),
    ("sfixed64", _F.TYPE_SFIXED64),
    ("bool", _F.TYPE_BOOL),
    ("string", _F.TYPE_STRING),
    ("bytes", _F.TYPE_BYTES),
)
"""The value types of an attribute, in field-number order: the i-th is ``<type>_val``
(field 3 + 2 i) and ``<Type>List`` ``<type>_list`` (field 4 + 2 i)."""

COMM_TYPE_NAMES = {**{n: name for n, (name, _) in COMM_TYPES.items()}, BARRIER: BARRIER_NAME}
"""``CollectiveCommType``: the collectives clustersim replays, and ``BARRIER``."""

Field = tuple[str, int, int, str, bool]
"""A field: name, number, type, type name of a message or enum field (else ""), repeated."""


def _list_name(value_type: str) -> str:
    return value_type[0].upper() + value_type[1:] + "List"


def _message(name: str, fields: list[Field], oneof: str = "") -> descriptor_pb2.DescriptorProto:
    """A message of ``fields``; with ``oneof``, every field from number 3 on is in it."""
    message = descriptor_pb2.DescriptorProto(name=name)
    if oneof:
        message.oneof_decl.add(name=oneof)
    for field_name, number, kind, type_name, repeated in fields:
        field = message.field.add(name=field_name, number=number, type=kind)
        field.label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
        if type_name:
            field.type_name = f".{PACKAGE}.{type_name}"
        if oneof and number >= 3:
            field.oneof_index = 0
    return message


def _enum(name: str, values: dict[int, str]) -> descriptor_pb2.EnumDescriptorProto:
    enum = descriptor_pb2.EnumDescriptorProto(name=name)
    for number, value_name in sorted(values.items()):
        enum.value.add(name=value_name, number=number)
    return enum


def file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    """``et_def.proto`` as a ``FileDescriptorProto`` (the layout in the module docstring)."""
    proto = descriptor_pb2.FileDescriptorProto(
        name="clustersim/chakra_et_def.proto", package=PACKAGE, syntax="proto3"
    )
    attribute: list[Field] = [("name", 1, _F.TYPE_STRING, "", False)]
    attribute.append(("doc_string", 2, _F.TYPE_STRING, "", False))
    for i, (value_type, kind) in enumerate(ATTRIBUTE_TYPES):
        attribute.append((f"{value_type}_val", 3 + 2 * i, kind, "", False))
        list_type = _list_name(value_type)
        attribute.append((f"{value_type}_list", 4 + 2 * i, _F.TYPE_MESSAGE, list_type, False))
        proto.message_type.append(_message(list_type, [("values", 1, kind, "", True)]))
    proto.message_type.append(_message("AttributeProto", attribute, oneof="value"))
    uint64, string, message = _F.TYPE_UINT64, _F.TYPE_STRING, _F.TYPE_MESSAGE
    metadata: list[Field] = [("version", 1, string, "", False)]
    metadata.append(("attr", 2, message, "AttributeProto", True))
    proto.message_type.append(_message("GlobalMetadata", metadata))
    proto.enum_type.append(_enum("NodeType", NODE_TYPES))
    proto.enum_type.append(_enum("CollectiveCommType", COMM_TYPE_NAMES))
    node: list[Field] = [
        ("id", 1, uint64, "", False),
        ("name", 2, string, "", False),
        ("type", 3, _F.TYPE_ENUM, "NodeType", False),
        ("ctrl_deps", 4, uint64, "", True),
        ("data_deps", 5, uint64, "", True),
        ("start_time_micros", 6, uint64, "", False),
        ("duration_micros", 7, uint64, "", False),
        ("inputs", 8, message, "IOInfo", False),
        ("outputs", 9, message, "IOInfo", False),
        ("attr", 10, message, "AttributeProto", True),
    ]
    proto.message_type.append(_message("Node", node))
    io_info = [
        (name, i, string, "", False) for i, name in enumerate(("values", "shapes", "types"), 1)
    ]
    proto.message_type.append(_message("IOInfo", io_info))
    tensor = [
        (name, i, uint64, "", False)
        for i, name in enumerate(("tensor_id", "storage_id", "offset", "num_elem", "elem_bytes"), 1)
    ]
    proto.message_type.append(_message("Tensor", [*tensor, ("device", 6, string, "", False)]))
    return proto


@dataclass(frozen=True)
class EtMessages:
    """The message classes of the schema (protobuf messages: ``Node()``, ``ParseFromString``)."""

    GlobalMetadata: Any
    Node: Any
    AttributeProto: Any
    IOInfo: Any
    Tensor: Any
    lists: dict[str, Any]
    """``<type>`` -> its ``<Type>List`` class (``lists["int64"]`` is ``Int64List``)."""
    node_type: Any
    """The ``NodeType`` enum descriptor."""


@cache
def messages() -> EtMessages:
    """The schema's message classes, built once, in a descriptor pool of their own."""
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_descriptor())

    def cls(name: str) -> Any:
        return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.{name}"))

    return EtMessages(
        GlobalMetadata=cls("GlobalMetadata"),
        Node=cls("Node"),
        AttributeProto=cls("AttributeProto"),
        IOInfo=cls("IOInfo"),
        Tensor=cls("Tensor"),
        lists={t: cls(_list_name(t)) for t, _ in ATTRIBUTE_TYPES},
        node_type=pool.FindEnumTypeByName(f"{PACKAGE}.NodeType"),
    )
