-- bench/real/sqlite3.sql: the sqlite3 workload of bench/run.py's real
-- programs table, on an in-memory database (so that its pages are the
-- allocator's, not the file system's): @rows rows inserted in one
-- transaction, two indexes built, then queries, updates and deletes.
-- Run as: sqlite3 :memory: ".parameter set @rows 80000" ".read sqlite3.sql"
CREATE TABLE item(id INTEGER PRIMARY KEY, name TEXT, price REAL, tag TEXT, note TEXT);
BEGIN;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < @rows)
INSERT INTO item(id, name, price, tag, note)
SELECT i, printf('item-%08d-%s', (i * 7919) % @rows, hex(randomblob(6))), (i * 37 % 10007) / 7.0,
       'tag' || (i % 97), substr(hex(randomblob(64)), 1, 16 + i % 96)
FROM n;
COMMIT;
CREATE INDEX item_name ON item(name);
CREATE INDEX item_tag_price ON item(tag, price);
SELECT tag, count(*), round(avg(price), 2), max(length(note)) FROM item GROUP BY tag ORDER BY 2 DESC LIMIT 3;
SELECT count(*) FROM item WHERE name BETWEEN 'item-0000100' AND 'item-0000500';
SELECT count(*) FROM item a JOIN item b ON b.id = a.id + 97 WHERE a.tag = b.tag;
SELECT group_concat(name, ',') IS NOT NULL FROM (SELECT name FROM item ORDER BY note LIMIT 20000);
UPDATE item SET note = note || note, price = price * 1.1 WHERE id % 3 = 0;
DELETE FROM item WHERE id % 5 = 0;
SELECT count(*), round(sum(price)) FROM item WHERE tag IN ('tag1', 'tag2', 'tag3');
VACUUM;
SELECT count(*) FROM item;
