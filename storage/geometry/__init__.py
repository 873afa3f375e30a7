"""Geometry, pure computation: GeoJSON objects and legacy coordinate pairs parsed and checked with
MongoDB's messages (geo), spherical predicates and distances with S2's rules (spherical), and the
flat ones of `2d` and `$box`/`$polygon` (planar). It may import core only."""
