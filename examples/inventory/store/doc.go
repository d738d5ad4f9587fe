// Package store is the inventory service behind the example: its schema (an
// inventory table of stock per SKU and an orders table), the purchase
// statement sequence, and the figures a run is judged by.
//
// A purchase reads the stock, checks it covers the order, writes the new
// stock and records the order. It deliberately writes the new stock as a
// value computed from its read (UPDATE ... SET stock = ?), the shape most
// business code has once the computation is more than a subtraction. That is
// what makes it unsafe without mutual exclusion: two purchases that read the
// same stock both succeed and one write is lost. Run it inside guard.Do and
// the read and the write are serialised and fenced.
package store
