package client_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicemq/sluice/client"
)

// Produce records and wait for them; print where they went.
func Example() {
	ctx := context.Background()
	mustCreateTopic("greetings", 1) // sluice topic create greetings -p 1

	c, err := client.New(ctx, endpoint, client.APIKey(apiKey))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	p, err := c.NewProducer(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close(ctx)
	hello := &client.Record{Topic: "greetings", Key: []byte("en"), Value: []byte("hello")}
	bonjour := &client.Record{Topic: "greetings", Key: []byte("fr"), Value: []byte("bonjour")}
	if err := p.ProduceSync(ctx, hello, bonjour); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(hello.Value), "at offset", hello.Offset)
	fmt.Println(string(bonjour.Value), "at offset", bonjour.Offset)
	// Output:
	// hello at offset 0
	// bonjour at offset 1
}

// Produce asynchronously: the callback reports each record's fate once.
func ExampleProducer_Produce() {
	ctx := context.Background()
	mustCreateTopic("clicks", 1)
	c, err := client.New(ctx, endpoint, client.APIKey(apiKey))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	p, err := c.NewProducer(ctx, client.WithLinger(10*time.Millisecond), client.WithCompression("zstd"))
	if err != nil {
		fmt.Println(err)
		return
	}
	failed := 0
	for i := range 1000 {
		p.Produce(ctx, &client.Record{Topic: "clicks", Value: fmt.Appendf(nil, "click %d", i)}, func(r *client.Record, err error) {
			var de *client.DeliveryError
			switch {
			case errors.As(err, &de) && de.Indefinite:
				failed++ // may or may not be in the log: reconcile
			case err != nil:
				failed++ // certainly not written: safe to send again
			}
		})
	}
	if err := p.Close(ctx); err != nil { // flushes and waits for every callback
		fmt.Println(err)
	}
	fmt.Println("failed:", failed)
	// Output: failed: 0
}

// Read a partition from the beginning.
func ExampleConsumer() {
	ctx := context.Background()
	mustCreateTopic("letters", 1)
	c, err := client.New(ctx, endpoint, client.APIKey(apiKey))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	p, _ := c.NewProducer(ctx)
	for _, v := range []string{"a", "b", "c"} {
		_ = p.ProduceSync(ctx, &client.Record{Topic: "letters", Value: []byte(v)})
	}
	_ = p.Close(ctx)

	cs, err := c.NewConsumer()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cs.Close()
	if err := cs.Assign(ctx, "letters", 0, client.Earliest()); err != nil {
		fmt.Println(err)
		return
	}
	for got := 0; got < 3; {
		recs, err := cs.Poll(ctx)
		if err != nil {
			fmt.Println(err)
			return
		}
		for _, r := range recs {
			fmt.Printf("%d: %s\n", r.Offset, r.Value)
			got++
		}
	}
	// Output:
	// 0: a
	// 1: b
	// 2: c
}
