package testclient

import "net/http"

// WithKey returns a client of the same instance that sends token as its
// API key (Authorization: Bearer token); "" sends none.
func (c *Client) WithKey(token string) *Client {
	out := *c
	out.header = http.Header{}
	if token != "" {
		out.header.Set("Authorization", "Bearer "+token)
	}
	return &out
}

// Header returns the headers the client adds to every request (its API
// key), for requests made without it (an event stream).
func (c *Client) Header() http.Header { return c.header.Clone() }
