package kube

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// PodClient is the part of the pods API the cache needs: list and watch.
// client-go's typed PodInterface (and its fake) satisfy it.
type PodClient interface {
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// restPods lists and watches pods over a bare REST client with a scheme of
// core/v1 alone. client-go's typed clientset would link every resource's
// client and apply configuration into the agent (+20 MB) for two calls.
type restPods struct {
	rc     rest.Interface
	params runtime.ParameterCodec
}

func newRESTPods(cfg *rest.Config) (*restPods, error) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	c := rest.CopyConfig(cfg)
	c.APIPath = "/api"
	c.GroupVersion = &corev1.SchemeGroupVersion
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	c.ContentType = runtime.ContentTypeJSON
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("kubernetes REST client: %w", err)
	}
	return &restPods{rc: rc, params: runtime.NewParameterCodec(scheme)}, nil
}

// getNode reads one Node object (its labels: the node pool).
func (p *restPods) getNode(ctx context.Context, name string) (*corev1.Node, error) {
	var n corev1.Node
	err := p.rc.Get().Resource("nodes").Name(name).Do(ctx).Into(&n)
	return &n, err
}

func (p *restPods) List(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error) {
	var l corev1.PodList
	err := p.rc.Get().Resource("pods").VersionedParams(&opts, p.params).Do(ctx).Into(&l)
	return &l, err
}

func (p *restPods) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return p.rc.Get().Resource("pods").VersionedParams(&opts, p.params).Watch(ctx)
}
