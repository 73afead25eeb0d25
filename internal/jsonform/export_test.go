package jsonform

var IsMarshalled = isMarshalled
