package otlp

import (
	"math"

	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/protobuf/encoding/protowire"
)

func sizeKeyValue(f protowire.Number, kv attribute.KeyValue) int {
	v := appendAnyValue(nil, kv.Value)
	return sizeBytesAlways(f, sizeString(1, string(kv.Key))+sizeBytes(2, len(v)))
}

func sizeBytesAlways(f protowire.Number, n int) int {
	return protowire.SizeTag(f) + protowire.SizeBytes(n)
}

// appendKeyValue appends kv as a KeyValue message in field f: key 1,
// value 2 (AnyValue).
func appendKeyValue(b []byte, f protowire.Number, kv attribute.KeyValue) []byte {
	v := appendAnyValue(nil, kv.Value)
	b = protowire.AppendTag(b, f, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(sizeString(1, string(kv.Key))+sizeBytes(2, len(v))))
	b = appendString(b, 1, string(kv.Key))
	return appendBytes(b, 2, v)
}

// appendAnyValue appends the fields of an AnyValue: string 1, bool 2, int
// 3, double 4, array 5 (ArrayValue: values 1), kvlist 6 (KeyValueList:
// values 1), bytes 7.
func appendAnyValue(b []byte, v attribute.Value) []byte {
	switch v.Type() {
	case attribute.STRING:
		return protowire.AppendString(protowire.AppendTag(b, 1, protowire.BytesType), v.AsString())
	case attribute.BOOL:
		x := uint64(0)
		if v.AsBool() {
			x = 1
		}
		return appendVarintField(b, 2, x)
	case attribute.INT64:
		return appendVarintField(b, 3, uint64(v.AsInt64()))
	case attribute.FLOAT64:
		return appendFixed64Field(b, 4, math.Float64bits(v.AsFloat64()))
	case attribute.BYTESLICE:
		return appendBytes(b, 7, v.AsByteSlice())
	case attribute.BOOLSLICE:
		return appendArray(b, v.AsBoolSlice(), attribute.BoolValue)
	case attribute.INT64SLICE:
		return appendArray(b, v.AsInt64Slice(), attribute.Int64Value)
	case attribute.FLOAT64SLICE:
		return appendArray(b, v.AsFloat64Slice(), attribute.Float64Value)
	case attribute.STRINGSLICE:
		return appendArray(b, v.AsStringSlice(), attribute.StringValue)
	case attribute.SLICE:
		return appendArray(b, v.AsSlice(), func(v attribute.Value) attribute.Value { return v })
	case attribute.MAP:
		var list []byte
		for _, kv := range v.AsMap() {
			list = appendKeyValue(list, 1, kv)
		}
		return appendBytes(b, 6, list)
	}
	return b // EMPTY: an AnyValue with no field set
}

func appendArray[T any](b []byte, xs []T, val func(T) attribute.Value) []byte {
	var arr []byte
	for _, x := range xs {
		arr = appendBytes(arr, 1, appendAnyValue(nil, val(x)))
	}
	return appendBytes(b, 5, arr)
}

// The proto3 field helpers: a string or bytes field is omitted when empty
// (the default), as the generated code does.
func appendString(b []byte, f protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	return protowire.AppendString(protowire.AppendTag(b, f, protowire.BytesType), s)
}

func appendBytes(b []byte, f protowire.Number, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	return protowire.AppendBytes(protowire.AppendTag(b, f, protowire.BytesType), v)
}

func appendVarintField(b []byte, f protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(b, f, protowire.VarintType), v)
}

func appendFixed64Field(b []byte, f protowire.Number, v uint64) []byte {
	return protowire.AppendFixed64(protowire.AppendTag(b, f, protowire.Fixed64Type), v)
}

func sizeString(f protowire.Number, s string) int {
	if s == "" {
		return 0
	}
	return protowire.SizeTag(f) + protowire.SizeBytes(len(s))
}

func sizeBytes(f protowire.Number, n int) int {
	if n == 0 {
		return 0
	}
	return protowire.SizeTag(f) + protowire.SizeBytes(n)
}
