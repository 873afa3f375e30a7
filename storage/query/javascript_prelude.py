"""The JavaScript every operation's context starts with: mongod's server-side types (ObjectId,
NumberLong, NumberInt, NumberDecimal, Timestamp, BinData, MinKey, MaxKey), its helpers
(`hex_md5`, `Array.sum`, `Array.avg`, `isObject`, `tojson`, `print`), the codec that turns the
values storage/query/javascript_values.py sends into those types and back, and the one entry
point the engine calls (`__ebb.call`)."""

from __future__ import annotations

#: Tagged values travel as objects with this key, which no BSON field name can hold (a NUL).
TAG = "\x00"

PRELUDE = r"""
(function (g) {
  'use strict';
  var TAG = '\u0000';

  function ObjectId(hex) {
    if (!(this instanceof ObjectId)) return new ObjectId(hex);
    if (hex === undefined) {
      var s = Math.floor(Date.now() / 1000).toString(16);
      while (s.length < 8) s = '0' + s;
      for (var i = 0; i < 16; i++) s += Math.floor(Math.random() * 16).toString(16);
      hex = s;
    }
    if (typeof hex !== 'string' || !/^[0-9a-fA-F]{24}$/.test(hex))
      throw new Error('invalid object id: length');
    this.str = hex.toLowerCase();
  }
  ObjectId.prototype.toString = function () { return 'ObjectId("' + this.str + '")'; };
  ObjectId.prototype.tojson = ObjectId.prototype.toString;
  ObjectId.prototype.valueOf = function () { return this.str; };
  ObjectId.prototype.toHexString = function () { return this.str; };
  ObjectId.prototype.equals = function (o) { return o instanceof ObjectId && o.str === this.str; };
  ObjectId.prototype.getTimestamp = function () {
    return new Date(parseInt(this.str.substr(0, 8), 16) * 1000);
  };

  function NumberLong(v) {
    if (!(this instanceof NumberLong)) return new NumberLong(v);
    if (v instanceof NumberLong) v = v.__s;
    var s = typeof v === 'string' ? v : String(Math.trunc(Number(v === undefined ? 0 : v)));
    Object.defineProperty(this, '__s', { value: s });
    this.floatApprox = Number(s);
  }
  NumberLong.prototype.valueOf = function () { return Number(this.__s); };
  NumberLong.prototype.toNumber = NumberLong.prototype.valueOf;
  NumberLong.prototype.toString = function () {
    var n = Number(this.__s);
    return Number.isSafeInteger(n) ? 'NumberLong(' + this.__s + ')' : 'NumberLong("' + this.__s + '")';
  };
  NumberLong.prototype.tojson = NumberLong.prototype.toString;
  NumberLong.prototype.compare = function (o) {
    var a = BigInt(this.__s), b = BigInt(o instanceof NumberLong ? o.__s : Math.trunc(o));
    return a < b ? -1 : a > b ? 1 : 0;
  };
  NumberLong.prototype.exactValueString = function () { return this.__s; };

  function NumberInt(v) {
    if (!(this instanceof NumberInt)) return new NumberInt(v);
    Object.defineProperty(this, '__v', { value: Number(v === undefined ? 0 : v) | 0 });
  }
  NumberInt.prototype.valueOf = function () { return this.__v; };
  NumberInt.prototype.toNumber = NumberInt.prototype.valueOf;
  NumberInt.prototype.toString = function () { return 'NumberInt(' + this.__v + ')'; };
  NumberInt.prototype.tojson = NumberInt.prototype.toString;

  function NumberDecimal(v) {
    if (!(this instanceof NumberDecimal)) return new NumberDecimal(v);
    Object.defineProperty(this, '__s', { value: String(v === undefined ? '0' : v) });
  }
  NumberDecimal.prototype.toString = function () { return 'NumberDecimal("' + this.__s + '")'; };
  NumberDecimal.prototype.tojson = NumberDecimal.prototype.toString;
  NumberDecimal.prototype.valueOf = function () { return Number(this.__s); };

  function Timestamp(t, i) {
    if (!(this instanceof Timestamp)) return new Timestamp(t, i);
    this.t = t === undefined ? 0 : t; this.i = i === undefined ? 0 : i;
  }
  Timestamp.prototype.getTime = function () { return this.t; };
  Timestamp.prototype.getInc = function () { return this.i; };
  Timestamp.prototype.toString = function () { return 'Timestamp(' + this.t + ', ' + this.i + ')'; };
  Timestamp.prototype.tojson = Timestamp.prototype.toString;

  function BinData(type, b64) {
    if (!(this instanceof BinData)) return new BinData(type, b64);
    this.type = type; this.len = atob(b64).length;
    Object.defineProperty(this, '__b64', { value: b64 });
  }
  BinData.prototype.base64 = function () { return this.__b64; };
  BinData.prototype.subtype = function () { return this.type; };
  BinData.prototype.length = function () { return this.len; };
  BinData.prototype.hex = function () {
    var s = atob(this.__b64), out = '';
    for (var i = 0; i < s.length; i++) out += ('0' + s.charCodeAt(i).toString(16)).slice(-2);
    return out;
  };
  BinData.prototype.toString = function () {
    return 'BinData(' + this.type + ',"' + this.__b64 + '")';
  };
  BinData.prototype.tojson = BinData.prototype.toString;

  function Code(code) { if (!(this instanceof Code)) return new Code(code); this.code = code; }
  Code.prototype.toString = function () { return this.code; };

  var MinKey = { toString: function () { return '{ "$minKey" : 1 }'; } };
  var MaxKey = { toString: function () { return '{ "$maxKey" : 1 }'; } };

  // -- md5 (RFC 1321) of a string's UTF-8 bytes, as mongod's hex_md5 --------------------------------
  function utf8(s) {
    var out = [];
    for (var i = 0; i < s.length; i++) {
      var c = s.codePointAt(i);
      if (c > 0xffff) i++;
      if (c < 0x80) out.push(c);
      else if (c < 0x800) out.push(0xc0 | (c >> 6), 0x80 | (c & 63));
      else if (c < 0x10000) out.push(0xe0 | (c >> 12), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
      else out.push(0xf0 | (c >> 18), 0x80 | ((c >> 12) & 63), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
    }
    return out;
  }
  var K = [], S = [7, 12, 17, 22, 5, 9, 14, 20, 4, 11, 16, 23, 6, 10, 15, 21];
  for (var k = 0; k < 64; k++) K[k] = Math.floor(Math.abs(Math.sin(k + 1)) * 4294967296) | 0;
  function hex_md5(str) {
    var bytes = utf8(String(str)), n = bytes.length;
    var words = new Array((((n + 8) >> 6) + 1) * 16).fill(0);
    for (var i = 0; i < n; i++) words[i >> 2] |= bytes[i] << ((i % 4) * 8);
    words[n >> 2] |= 0x80 << ((n % 4) * 8);
    words[words.length - 2] = (n * 8) | 0;
    words[words.length - 1] = Math.floor(n / 536870912) | 0;
    var a0 = 0x67452301, b0 = 0xefcdab89 | 0, c0 = 0x98badcfe | 0, d0 = 0x10325476;
    for (var off = 0; off < words.length; off += 16) {
      var a = a0, b = b0, c = c0, d = d0;
      for (var j = 0; j < 64; j++) {
        var f, gi, r = j >> 4;
        if (r === 0) { f = (b & c) | (~b & d); gi = j; }
        else if (r === 1) { f = (d & b) | (~d & c); gi = (5 * j + 1) % 16; }
        else if (r === 2) { f = b ^ c ^ d; gi = (3 * j + 5) % 16; }
        else { f = c ^ (b | ~d); gi = (7 * j) % 16; }
        var tmp = d; d = c; c = b;
        var x = (a + f + K[j] + words[off + gi]) | 0, s = S[r * 4 + (j % 4)];
        b = (b + ((x << s) | (x >>> (32 - s)))) | 0;
        a = tmp;
      }
      a0 = (a0 + a) | 0; b0 = (b0 + b) | 0; c0 = (c0 + c) | 0; d0 = (d0 + d) | 0;
    }
    var out = '';
    [a0, b0, c0, d0].forEach(function (w) {
      for (var q = 0; q < 4; q++) out += ('0' + ((w >>> (q * 8)) & 255).toString(16)).slice(-2);
    });
    return out;
  }

  // -- the shell helpers mongod's server-side JavaScript has ------------------------------------
  Array.sum = function (arr) {
    if (arr.length === 0) return null;
    var s = arr[0];
    for (var i = 1; i < arr.length; i++) s += arr[i];
    return s;
  };
  Array.avg = function (arr) { return arr.length === 0 ? null : Array.sum(arr) / arr.length; };
  Array.contains = function (arr, x) { return arr.indexOf(x) >= 0; };
  Array.unique = function (arr) {
    var out = [];
    arr.forEach(function (x) { if (out.indexOf(x) < 0) out.push(x); });
    return out;
  };
  function isObject(x) { return typeof x === 'object' && x !== null; }
  function isNumber(x) { return typeof x === 'number'; }
  function isString(x) { return typeof x === 'string'; }
  function tojson(x) {
    if (x === undefined) return 'undefined';
    if (x === null) return 'null';
    if (typeof x === 'object' && typeof x.tojson === 'function') return x.tojson();
    if (x instanceof Date) return 'ISODate("' + x.toISOString() + '")';
    return JSON.stringify(x);
  }

  // -- values in and out ------------------------------------------------------------------------
  function decode(text) {
    return JSON.parse(text, function (key, v) {
      if (v === null || typeof v !== 'object' || !(TAG in v)) return v;
      switch (v[TAG]) {
        case 'u': return undefined;
        case 'f': return Number(v.v);
        case 'l': return new NumberLong(v.v);
        case 'd': return new NumberDecimal(v.v);
        case 'D': return new Date(v.v);
        case 'o': return new ObjectId(v.v);
        case 't': return new Timestamp(v.t, v.i);
        case 'b': return new BinData(v.t, v.v);
        case 'n': return MinKey;
        case 'x': return MaxKey;
        case 'r':
          try { return new RegExp(v.p, v.f.replace(/[^gimsuy]/g, '')); }
          catch (e) { return { '$regex': v.p, '$options': v.f }; }
        case 'c':
          try { return compile(v.v); } catch (e) { return new Code(v.v); }
      }
      return v;
    });
  }

  function encode(value) {
    var depth = 0;
    function walk(v) {
      if (v === undefined) return { '\u0000': 'u' };
      if (v === null || typeof v === 'boolean' || typeof v === 'string') return v;
      if (typeof v === 'number') {
        return isFinite(v) && !Object.is(v, -0) ? v : { '\u0000': 'f', 'v': String(v) };
      }
      if (typeof v === 'bigint') return Number(v);
      if (typeof v === 'function') return { '\u0000': 'c', 'v': String(v) };
      if (typeof v === 'symbol') return String(v);
      if (v instanceof Date) return { '\u0000': 'D', 'v': v.getTime() };
      if (v instanceof RegExp) return { '\u0000': 'r', 'p': v.source, 'f': v.flags };
      if (v instanceof ObjectId) return { '\u0000': 'o', 'v': v.str };
      if (v instanceof NumberLong) return { '\u0000': 'l', 'v': v.__s };
      if (v instanceof NumberInt) return { '\u0000': 'i', 'v': v.__v };
      if (v instanceof NumberDecimal) return { '\u0000': 'd', 'v': v.__s };
      if (v instanceof Timestamp) return { '\u0000': 't', 't': v.t, 'i': v.i };
      if (v instanceof BinData) return { '\u0000': 'b', 't': v.type, 'v': v.__b64 };
      if (v === MinKey) return { '\u0000': 'n' };
      if (v === MaxKey) return { '\u0000': 'x' };
      if (v instanceof Code) return { '\u0000': 'c', 'v': v.code };
      if (++depth > 150) {
        throw new Native(17279, 'Exceeded depth limit of 150 when converting js object to ' +
          'BSON. Do you have a cycle?');
      }
      var out;
      if (Array.isArray(v)) {
        out = [];
        for (var i = 0; i < v.length; i++) out.push(walk(v[i]));
      } else {
        out = {};
        for (var name in v) {
          if (!Object.prototype.hasOwnProperty.call(v, name)) continue;
          out[name] = walk(v[name]);
        }
      }
      depth--;
      return out;
    }
    return JSON.stringify(walk(value));
  }

  // A function from its source, as mongod makes one: a function definition as it is, an
  // expression as the value a function returns, statements as a function's body (the value of
  // the last one returned).
  function compile(src) {
    src = String(src);
    while (/[;\s]$/.test(src)) src = src.slice(0, -1);
    if (/^\s*(async\s+)?function\b/.test(src) || /^\s*(\([^)]*\)|[A-Za-z_$][\w$]*)\s*=>/.test(src)) {
      var f = (0, eval)('(' + src + '\n)');
      if (typeof f === 'function') return f;
    }
    try { return new Function('return (' + src + '\n);'); } catch (e) {}
    var cut = src.lastIndexOf(';');
    if (cut > 0) {
      try {
        return new Function(src.slice(0, cut + 1) + '\nreturn (' + src.slice(cut + 1) + '\n);');
      } catch (e) {}
    }
    return new Function(src);
  }

  var fns = [];
  g.__ebb = {
    define: function (src) { fns.push(compile(src)); return fns.length - 1; },
    scope: function (text) {
      var s = decode(text);
      for (var name in s) g[name] = s[name];
      return 0;
    },
    // payload: [this (null: the global object), [arguments...]]; the document of a $where is
    // also the global `obj`, as in mongod.
    call: function (id, text) {
      var a = decode(text);
      var self = a[0] === null ? g : a[0];
      if (a[0] !== null) g.obj = a[0];
      return encode(fns[id].apply(self, a[1]));
    },
    // A predicate's call ($where): JavaScript's truth of the value.
    test: function (id, text) {
      var a = decode(text);
      g.obj = a[0];
      return !!fns[id].apply(a[0], a[1]);
    },
    // Many calls in one: [[this, args], ...] -> the encoded results.
    calls: function (id, text) {
      var batch = decode(text), out = [];
      for (var k = 0; k < batch.length; k++) {
        var self = batch[k][0] === null ? g : batch[k][0];
        if (batch[k][0] !== null) g.obj = batch[k][0];
        out.push(fns[id].apply(self, batch[k][1]));
      }
      return encode(out);
    },
    // A map function's emits for each document of a batch: [[key, value], ...] per document.
    map: function (id, text) {
      var docs = decode(text), out = [], emitted;
      g.emit = function (k, v) {
        if (arguments.length !== 2) throw new Native(31220, 'emit takes 2 args');
        emitted.push([k === undefined ? null : k, v]);
      };
      for (var k = 0; k < docs.length; k++) {
        emitted = [];
        g.obj = docs[k];
        fns[id].call(docs[k]);
        out.push(emitted);
      }
      return encode(out);
    },
    // $accumulator's state through many accumulate (or merge) calls, in one call into V8.
    fold: function (id, text) {
      var a = decode(text), state = a[0];
      for (var k = 0; k < a[1].length; k++) state = fns[id].apply(g, [state].concat(a[1][k]));
      return encode(state);
    },
  };
  // An error mongod raises in its own code, not JavaScript's: the engine reports its code.
  function Native(code, message) { this.code = code; this.message = message; }
  Native.prototype.toString = function () { return 'EbbdbNative' + this.code + ': ' + this.message; };

  g.__ebbNative = function (code, message) { return new Native(code, message); };
  g.ObjectId = ObjectId; g.NumberLong = NumberLong; g.NumberInt = NumberInt;
  g.NumberDecimal = NumberDecimal; g.Timestamp = Timestamp; g.BinData = BinData; g.Code = Code;
  g.MinKey = MinKey; g.MaxKey = MaxKey; g.hex_md5 = hex_md5; g.isObject = isObject;
  g.isNumber = isNumber; g.isString = isString; g.tojson = tojson;
  g.print = function () {}; g.printjson = function () {};
  g.ISODate = function (s) { return s === undefined ? new Date() : new Date(s); };
})(globalThis);
0
"""
